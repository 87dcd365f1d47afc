"""The Jinja environment over templates/ and the one call that turns a plan into script text.

Templates (templates/ in the repository, see datafiles.py): templates/parts/ are shared by every
scheduler (environment, rendezvous, launch, preemption, preflight); templates/<backend>/ holds
each scheduler's roots (job.sh.j2, array.sh.j2), which include the parts and add what only that
scheduler does. StrictUndefined: a typo in a template is an error, never an empty string. The
filters that quote are quoting.py's.
"""
from __future__ import annotations

import functools

import jinja2

from ..datafiles import data_dir
from .quoting import FILTERS

TEMPLATES = data_dir("templates")


@functools.cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
        # The templates do not change under a running hpctrain: without this, Jinja stats every
        # template file on every get_template, a dozen per render, 1,000 renders in a sweep.
        auto_reload=False,
    )
    env.filters.update(FILTERS)
    return env


def render_plan(plan, header: list[str], root: str = "job.sh.j2") -> str:
    """The script for a plan (a LaunchPlan, or an ArrayPlan with root "array.sh.j2") from its
    backend's template folder: same plan, same bytes. The header (the directive table in the
    scheduler's syntax) comes from the caller's backend: rendering stays below the backends, one
    of which renders parts of a script itself (submitit)."""
    return environment().get_template(f"{plan.backend}/{root}").render(plan=plan, header=header)


def render_part(plan, part: str, **values) -> str:
    """One template alone (submitit's batch prelude runs some of a job script's parts)."""
    return environment().get_template(part).render(plan=plan, **values)
