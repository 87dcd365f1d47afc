"""Chains on the real local Slurm cluster: a run that waits for another (`--after`, `after:`),
what `status` says while it waits, and a dependency on a run that failed."""
from __future__ import annotations

import json
import sys
import time

import yaml

from tests.conftest import ROOT, submitted, wait_for_job

PROGRAM = ROOT / "tests" / "programs" / "echo_rank.py"


def job_file(tmp_path, name, setup=(), **keys):
    doc = {"name": name, "script": str(PROGRAM), "python": sys.executable, "setup": list(setup),
           "resources": {"nodes": 1}, **keys}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def hold_until(flag, then="true"):
    """A setup line that keeps the job RUNNING until the test creates `flag` (at most 120 s)."""
    return f"for _ in $(seq 600); do [ -e {flag} ] && break; sleep 0.2; done; {then}"


def status_json(cli, run_dir):
    return json.loads(cli("status", run_dir, "--json").stdout)


def wait_until(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"not {what} within {timeout} s")


def test_chain_of_two_second_starts_after_the_first_succeeded(cli, cluster, tmp_path):
    flag, first_done = tmp_path / "go", tmp_path / "first-done"
    first = job_file(tmp_path, "first", [hold_until(flag, f"touch {first_done}")])
    job_a, dir_a = submitted(cli("submit", first, "--site", cluster).stdout)
    # The second fails its setup if it ever starts before the first's program ran.
    second = job_file(tmp_path, "second", [f"test -e {first_done}"], after=str(dir_a))
    job_b, dir_b = submitted(cli("submit", second, "--site", cluster).stdout)

    shown = wait_until(lambda: (lambda s: s if s["state"]["state"] == "PENDING" else None)(
        status_json(cli, dir_b)), 60, "pending")
    assert shown["waits_for"][0]["mode"] == "afterok", shown
    assert shown["waits_for"][0]["job"] == job_a and shown["waits_for"][0]["verdict"] == "waiting"
    text = cli("status", dir_b).stdout
    assert f"after     afterok run {dir_a.name} (job {job_a}): " in text, text
    assert "Dependency" in text, text  # Slurm's own reason for holding it

    flag.touch()
    assert wait_for_job(job_a, timeout=180)["JobState"] == "COMPLETED"
    info = wait_for_job(job_b, timeout=180)
    assert info["JobState"] == "COMPLETED", info
    assert (dir_b / "results" / "rank-0.json").is_file()  # its program ran, after the first's


def test_dependency_on_a_failed_run_never_runs_and_status_says_why(cli, cluster, tmp_path):
    flag = tmp_path / "go"
    failing = job_file(tmp_path, "failing", [hold_until(flag, "exit 3")])
    job_a, dir_a = submitted(cli("submit", failing, "--site", cluster).stdout)
    after_ok = job_file(tmp_path, "needs-ok")
    job_b, dir_b = submitted(cli("submit", after_ok, "--site", cluster, "--after", job_a).stdout)
    on_fail = job_file(tmp_path, "on-fail")
    job_c, dir_c = submitted(cli("submit", on_fail, "--site", cluster,
                                 "--after", f"afternotok:{dir_a.name}").stdout)
    flag.touch()
    assert wait_for_job(job_a, timeout=180)["JobState"] == "FAILED"
    # --kill-on-invalid-dep=yes: Slurm ends it instead of keeping it pending forever.
    info_b = wait_for_job(job_b, timeout=180)
    assert info_b["JobState"] == "CANCELLED", info_b
    assert wait_for_job(job_c, timeout=180)["JobState"] == "COMPLETED"
    st = status_json(cli, dir_b)
    assert st["waits_for"] and st["waits_for"][0]["verdict"] == "never", st
    text = cli("status", dir_b, check=False).stdout
    assert f"after     afterok run {dir_a.name} (job {job_a}): FAILED - afterok can never be met" in text, text

    # Once the first has failed, a new afterok on it is refused at load, naming why.
    refused = cli("submit", after_ok, "--site", cluster, "--after", str(dir_a), check=False)
    assert refused.returncode == 2 and "never" in refused.stderr, refused.stderr


def test_a_sweep_waits_for_a_run_as_one_array(cli, cluster, tmp_path):
    flag, first_done = tmp_path / "go", tmp_path / "first-done"
    first = job_file(tmp_path, "train", [hold_until(flag, f"touch {first_done}")])
    job_a, dir_a = submitted(cli("submit", first, "--site", cluster).stdout)
    sweep = job_file(tmp_path, "evaluate", [f"test -e {first_done}"], seed=1,
                     sweep={"seeds": [1, 2]})
    job_b, dir_b = submitted(cli("submit", sweep, "--site", cluster, "--after", dir_a.name).stdout)
    shown = wait_until(lambda: (lambda s: s if s["waits_for"] else None)(status_json(cli, dir_b)),
                       60, "waiting")
    assert shown["waits_for"][0]["job"] == job_a and shown["state"]["state"] == "PENDING", shown
    flag.touch()
    assert wait_for_job(job_a, timeout=180)["JobState"] == "COMPLETED"
    final = wait_until(lambda: (lambda s: s if s["state"]["done"] else None)(
        status_json(cli, dir_b)), 240, "both tasks done")
    assert final["state"]["state"] == "COMPLETED", final
    for task in (0, 1):  # each task ran its program, after the run it waited for
        assert (dir_b / "tasks" / str(task) / "results" / "rank-0.json").is_file()
