"""Population-based training on the real local Slurm cluster (issue 42, item 6): a population of
4 is one job array (each member an array task of 1 node) training tests/programs/known_schedule.py
with its best lr dropping 100x halfway (3e-2, then 3e-4: issue 51's moving optimum); members copy top members' checkpoints and perturb their lr,
member 2 is requeued late in its run with `scontrol requeue` and continues from its own
checkpoint with the values it had, and the population's best beats every value it started from
kept fixed all along.

A member's restart here costs 4-7 s (srun, torchrun, the ranks' start; the more the machine is
loaded), so the program's steps are 1 s: at 0.5 s a restart cost 8-14 steps, 2-3 intervals of a
training of 10, and bottom members that fell behind had nobody left to copy before the end (1 run
of 20 lost to the fixed values on a loaded machine, and one in CI). Member 2 starts with the best
early value: requeued early, it fell behind every member that could copy it (members copy only
one that reached their interval), so it is requeued in the late half."""
from __future__ import annotations

import json
import math
import subprocess
import time

import yaml

from tests.conftest import submitted, wait_for_job
from tests.local.test_pbt_local import JOB as LOCAL_JOB
from tests.local.test_pbt_local import explored_from
from tests.programs.known_schedule import fixed

STEPS = 40
REQUEUE_AT = 28  # member 2 is requeued once it recorded this step
DROP = 100
JOB = dict(LOCAL_JOB, name="pbt4", resources={"nodes": 1, "procs_per_node": 1, "time": "00:10:00"},
           args=["--lr=0.001", f"--steps={STEPS}", "--step-time=1.0", f"--drop={DROP}"])


def _lineage(run_dir):
    out = {}
    for i in range(4):
        path = run_dir / "population" / f"member-{i}.jsonl"
        out[i] = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return out


def test_a_population_of_array_tasks_copies_and_a_requeued_member_continues(cli, cluster,
                                                                            tmp_path):
    path = tmp_path / "pop.yaml"
    path.write_text(yaml.safe_dump(JOB))
    job_id, run_dir = submitted(cli("submit", path, "--site", cluster).stdout)

    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        mine = _lineage(run_dir)[2]
        if any((r.get("step") or 0) >= REQUEUE_AT for r in mine):
            break
        time.sleep(0.3)
    else:
        raise AssertionError(f"member 2 never reached step {REQUEUE_AT}: {_lineage(run_dir)}")
    before = len(_lineage(run_dir)[2])
    subprocess.run(["scontrol", "requeue", f"{job_id}_2"], check=True)

    wait_for_job(job_id, timeout=400)
    lineage = _lineage(run_dir)
    assert all(recs and recs[-1]["event"] == "end" for recs in lineage.values()), lineage

    # The requeued member: its next start continues with the values of its newest record
    # before the requeue, and its program resumed from its own checkpoint past that step.
    again = [r for r in lineage[2][before - 1:] if r["event"] == "restart"
             and r["note"].startswith("continued")]
    assert again, lineage[2]
    kept = [r for r in lineage[2] if r["time"] < again[0]["time"]][-1]["params"]
    assert again[0]["params"] == kept
    resumed = [line.split() for line in (run_dir / "trials" / "0002" / "status" / "resumed.txt")
               .read_text().splitlines()]
    assert any(int(step) > REQUEUE_AT - 4 and float(lr) == kept["lr"] for step, lr in resumed), resumed

    # A member is judged again only past the interval it copied, once its new values trained,
    for recs in lineage.values():
        for r, after in zip(recs, recs[1:]):
            if r["event"] == "exploit" and after["event"] == "ready":
                assert after["interval"] > r["interval"], (r, after)
        # and copies nobody once its training is done
        done = [k for k, r in enumerate(recs) if r["event"] == "ready" and r["step"] >= STEPS]
        assert not done or all(r["event"] != "exploit" for r in recs[done[0]:]), recs

    # Copies and perturbations happened.
    copies = [r for recs in lineage.values() for r in recs if r["event"] == "exploit"]
    assert copies, lineage
    for r in copies:
        parents = explored_from(lineage, r)
        # (or, with resample_probability, a fresh draw from the space, as its record says)
        assert any(math.isclose(r["params"]["lr"], min(max(lr * f, 1e-5), 1e-1))
                   for lr in parents for f in (0.1, 10)) or (
            r.get("resampled") == ["lr"] and 1e-5 <= r["params"]["lr"] <= 1e-1), (r, parents)

    # The best member's checkpoint is the one it ended with, in the workspace.
    st = json.loads(cli("status", run_dir.name, "--json").stdout)["population"]
    saved = json.loads(open(st["best"]["checkpoint"]).read())
    assert saved["step"] == STEPS and math.isclose(saved["quality"], st["best"]["score"])
    # The population's best beats every value it started from, kept fixed all along.
    starts = [recs[0]["params"]["lr"] for recs in lineage.values()]
    story = "\n".join(f"member {m}: " + " ".join(
        f"{r['event']}@{r.get('step')}:{r['params']['lr']:.1e}:{r.get('score') or 0:.1f}"
        + (f"<{r['parent']}" if r.get("parent") is not None else "") for r in recs)
        for m, recs in lineage.items())
    assert st["best"]["score"] > max(fixed(lr, STEPS, DROP) for lr in starts) + 0.1, story
