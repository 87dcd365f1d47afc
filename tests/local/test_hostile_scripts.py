"""Hostile input, the rendered scripts for real on this machine: the walk of
tests/unit/test_hostile_inputs.py (every job and site field with every payload, on each backend)
again, and now
- shellcheck on the distinct shapes of the scripts it rendered, and
- a representative set of them RUN here — every field and every payload at least once among the
  (field, payload) pairs that render: a local job script with a stand-in interpreter that records
  what it was given (the launch must receive every value byte-exact: argv, environment, working
  directory), an ssh script's `probe head` (what submit runs on every host) for the fields it
  reads. The canary file that a command would create must never appear.
Every other pair is checked statically (bash -n, the directive table) in the unit tier; Slurm
scripts are run for real with the same payloads in tests/slurm/test_hostile_slurm.py.
"""
from __future__ import annotations

import pytest

from tests.hostile import tried
from tests.unit.test_hostile_inputs import PROBED, SCHEDULERS, _job_walk, _shellcheck, _site_walk


class Representatives:
    """Runs a rendered (field, payload) when its field or its payload has not run yet."""

    def __init__(self, scheduler: str):
        self.scheduler = scheduler
        self.fields: set[str] = set()
        self.payloads: set[str] = set()
        self.ran = 0

    def __call__(self, field, payload, rendered) -> None:
        if self.scheduler == "local" and not rendered.job.tasks:
            run = rendered.run_locally
        elif self.scheduler == "ssh" and field in PROBED:
            run = rendered.run_probe
        else:
            return  # a Slurm script runs on the cluster (tests/slurm/test_hostile_slurm.py)
        if field in self.fields and payload in self.payloads:
            return
        self.fields.add(field)
        self.payloads.add(payload)
        tried("execution")
        self.ran += 1
        run(payload, field)


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_job_field_scripts_pass_shellcheck_and_run(scheduler, home, tmp_path):
    runs = Representatives(scheduler)
    scripts, outcomes = _job_walk(scheduler, tmp_path, then=runs, count=False)
    assert outcomes["refused"] and outcomes["rendered"]
    _shellcheck(scripts, tmp_path)
    assert runs.ran or scheduler == "slurm"


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_site_field_scripts_pass_shellcheck_and_run(scheduler, home, tmp_path):
    runs = Representatives(scheduler)
    scripts, outcomes = _site_walk(scheduler, tmp_path, then=runs, count=False)
    assert outcomes["refused"] and outcomes["rendered"]
    _shellcheck(scripts, tmp_path)
    assert runs.ran or scheduler == "slurm"
