"""The manual's reference pages are generated from the code (scripts/gen-reference.py): every
field of the job and site schema carries its one-line meaning beside it, every command-line
option its help, and docs/reference/ is what the generator writes today."""
from __future__ import annotations

import argparse
import importlib.util
from typing import Annotated

import msgspec
import pytest

from tests.conftest import ROOT


@pytest.fixture(scope="module")
def gen():
    spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "scripts" / "gen-reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_schema_field_has_a_description(gen):
    from hpctrain.schema.spec import JobSpec, SiteProfile
    missing = gen.missing_descriptions(JobSpec) + gen.missing_descriptions(SiteProfile)
    assert not missing, ("fields without Annotated[..., Meta(description=...)]: " + ", ".join(missing))


def test_every_command_line_option_has_help(gen):
    assert not gen.missing_help(gen.build_cli_parser())


def test_reference_pages_are_up_to_date(gen):
    for name, text in gen.pages().items():
        page = ROOT / "docs" / "reference" / name
        assert page.exists() and page.read_text() == text, \
            f"docs/reference/{name} is out of date: run python scripts/gen-reference.py"


class Inner(msgspec.Struct):
    depth: Annotated[int, msgspec.Meta(ge=1)] = 1


class Outer(msgspec.Struct):
    named: Annotated[str, msgspec.Meta(description="has one")] = ""
    inner: Annotated[Inner | None, msgspec.Meta(description="a section")] = None


def test_the_checks_find_what_is_missing(gen):
    """The generator's own checks: a field or an option without its meaning is named."""
    assert gen.missing_descriptions(Outer) == ["Inner.depth (inner.depth)"]
    parser = argparse.ArgumentParser(prog="hpctrain")
    sub = parser.add_subparsers(dest="command")
    p = sub.add_parser("thing", help="does a thing")
    p.add_argument("--quiet", action="store_true")
    assert gen.missing_help(parser) == ["hpctrain thing --quiet"]


def test_pages_show_type_default_and_allowed_values(gen):
    job = gen.pages()["job.md"]
    assert "| `preemption.signal` | one of `USR1`, `USR2`" in job
    assert "| `resources.nodes` | integer ≥ 1, ≤ 100000 | `1` |" in job
    assert "— one of `command`, `rl_games`" in job  # the library registry's names
    assert "| `name` | text at most 100 characters | required |" in job
