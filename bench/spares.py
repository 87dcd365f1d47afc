"""From a node's failure to training again: a spare in the allocation against today's requeue
(issue 43, item 6), on the local Slurm cluster (tests/cluster/up.sh, partition debug).

Each repetition runs the same 2-node job twice: with resources.spare_nodes: 1 (3 nodes held) and
without (2 nodes). The stand-in nvidia-smi (tests/fakes) reports an uncorrected ECC error on the
allocation's second node; its health gate fails the first attempt. Measured from the batch
shell's `failure:` log line (the failure is known) to the next attempt's first progress report
(status/phases/JOB-ATTEMPT/rank-0.json first_step): with the spare, the swap and a new launch in
the same job; with the requeue, Slurm's requeue, the queue, a new batch shell and launch.

    flock -w 3600 /run/hpctrain-cluster.lock python bench/spares.py [--reps N]
"""
from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FAKES = ROOT / "tests" / "fakes"
FAILED = re.compile(r"^\[(\S+)\] hpctrain: failure: preflight failed", re.M)


def job_file(tmp: Path, spare: bool) -> Path:
    bad = tmp / f"bad-{int(spare)}"
    setup = [f"export PATH={FAKES}:$PATH FAKE_SMI_GPUS=1",
             f"[[ -s {bad} ]] || scontrol show hostnames \"$SLURM_JOB_NODELIST\" | sed -n 2p > {bad}",
             f"export FAKE_SMI_FAULT_$(cat {bad})=ecc:0:3"]
    path = tmp / f"spares-{int(spare)}.yaml"
    path.write_text(json.dumps({
        "name": f"bench-spares-{int(spare)}", "python": sys.executable,
        "script": "tests/programs/worker.py", "args": ["--seconds", 1, "--report"],
        "setup": setup, "resources": {"nodes": 2, "spare_nodes": int(spare), "gpus_per_node": 1,
                                      "procs_per_node": 1, "partition": "debug"}}))
    return path


def once(tmp: Path, spare: bool) -> float:
    out = subprocess.run([sys.executable, "-m", "hpctrain", "submit", str(job_file(tmp, spare)),
                          "--site", "localcluster"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    job = re.search(r"submitted .* job (\d+)", out).group(1)
    run_dir = Path(re.search(r"^run directory: (.+)$", out, re.M).group(1))
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        state = subprocess.run(["squeue", "-h", "-j", job, "-t", "all", "-o", "%T"],
                               capture_output=True, text=True).stdout.split()
        if state and state[0] in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"):
            break
        time.sleep(0.5)
    else:
        subprocess.run(["scancel", job])
        raise SystemExit(f"job {job} did not end in 300 s")
    log = "".join(Path(p).read_text() for p in glob.glob(str(run_dir / "logs" / "slurm-*.out")))
    failed = datetime.datetime.fromisoformat(FAILED.search(log).group(1).replace("Z", "+00:00"))
    # The second attempt: round 1 of the allocation, or restart 1 (HPCTRAIN_ATTEMPT).
    again = run_dir / "status" / "phases" / f"{job}-1" / "rank-0.json"
    first = float(json.loads(again.read_text())["first_step"])
    return first - failed.timestamp()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("HPCTRAIN_RUNS_DIR", tempfile.mkdtemp(prefix="bench-spares-"))
    rows: dict[str, list[float]] = {"spare": [], "requeue": []}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.reps):
            for kind in ("spare", "requeue"):  # interleaved: the machine's speed moves
                d = Path(tmp) / f"{rep}-{kind}"
                d.mkdir()
                rows[kind].append(once(d, kind == "spare"))
                print(f"{kind} {rep}: {rows[kind][-1]:.1f} s", flush=True)
    for kind, values in rows.items():
        print(f"{kind}: median {statistics.median(values):.1f} s (range {min(values):.1f}-"
              f"{max(values):.1f}, n={len(values)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
