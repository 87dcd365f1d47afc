"""The package list for setuptools (everything else is in pyproject.toml): found, not listed, so
that a new subpackage cannot be left out of the wheel; the two data folders beside the package
(pyproject.toml's package-dir) added by name."""
from setuptools import find_packages, setup

setup(packages=find_packages(include=["hpctrain", "hpctrain.*"]) + ["hpctrain.templates", "hpctrain.site_configs"])
