"""Shared by the operations tests on Slurm and on the local backend."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import yaml

WORKER = Path(__file__).resolve().parent / "programs" / "worker.py"


def job_file(tmp_path: Path, name: str, *, nodes: int = 1, procs: int = 1, args=(), sweep=None) -> Path:
    doc = {"name": name, "library": "command", "script": str(WORKER), "args": list(map(str, args)),
           "python": sys.executable, "seed": 100,
           "resources": {"nodes": nodes, "procs_per_node": procs, "time": "00:05:00"}}
    if sweep:
        doc["sweep"] = sweep
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def status_json(cli, ref, **kw) -> dict:
    return json.loads(cli("status", ref, "--json", **kw).stdout)


def wait_state(cli, ref, states, timeout=300) -> dict:
    deadline = time.monotonic() + timeout
    st = {}
    while time.monotonic() < deadline:
        st = status_json(cli, ref)
        if st["state"]["state"] in states:
            return st
        time.sleep(1)
    raise AssertionError(f"{ref} did not reach {states} in {timeout}s: {st.get('state')}")


def results(run_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(run_dir.glob("**/results/rank-*.json"))]


def max_overlap(intervals) -> int:
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals],
                    key=lambda x: (x[0], x[1]))
    cur = best = 0
    for _, d in events:
        cur += d
        best = max(best, cur)
    return best


def recorded_run(runs_dir: Path, job_id: str, *, run_id: str = "20260101-000000-aaaa",
                 name: str = "train", backend: str = "slurm", state: str = "SUBMITTED",
                 final: bool = False) -> Path:
    """A run directory and index entry as `submit` leaves them (for jobs that wait for it),
    without submitting anything."""
    from hpctrain.rank.records import RunRecord
    from hpctrain.runs.records import Run, add_to_index
    path = runs_dir / name / run_id
    path.mkdir(parents=True)
    RunRecord(run_id=run_id, name=name, site="localcluster", backend=backend, job_id=job_id,
              state=state, final=final).save(str(path / "run.json"))
    add_to_index(Run(path))
    return path
