"""The real Isaac Lab 3.0 (rsl_rl, Isaac-Cartpole, Newton on the CPU) through hpctrain against the
same training started by hand (issue 49's two performance rows):

1. start-up: from the command to rank 0's first finished training iteration, 2 ranks on this
   machine, `hpctrain submit --wait` (local site) against `torchrun --standalone` by hand with
   the same CPU patch (hpctrain's own rank/before/cpu_shims.py, imported by the hand wrapper
   below) and the same flags;
2. the hooks: rank 0's mean iteration time of the same 2-rank run by hand, with and without
   hpctrain's rsl_rl train hooks (rank/during/train_hooks.py: progress each iteration, the ranks'
   agreement on a stop, save-and-stop on a signal), same seed, from Isaac Lab's own "Training
   time" line.

Both contenders print the same rsl_rl lines; the first iteration is the moment rank 0's log
shows "Learning iteration 0/" (polled every 10 ms, for both). Reps are interleaved round-robin
after one untimed warm-up each. Needs scripts/install-isaaclab.sh's venv.

    python bench/isaaclab.py --reps 5 [--markdown out.md]
"""
from __future__ import annotations

import argparse
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
VENV = ROOT / ".venv-isaaclab"
PY = VENV / "bin" / "python"
ENV = {"ISAACSIM_ASSET_ROOT": str(VENV / "assets"), "WARP_CACHE_PATH": str(VENV / "cache" / "warp"),
       "XDG_CACHE_HOME": str(VENV / "cache" / "xdg")}
FIRST = "Learning iteration 0/"
TRAINING_TIME = re.compile(r"Training time: ([0-9.]+) seconds")

# The hand run's rank program: hpctrain's own CPU shims (the same patch), optionally its train
# hooks, then Isaac Lab's CLI in this process, as every rank of the hpctrain run does.
WRAPPER = """
import os, runpy, sys
sys.path.insert(0, {rank_parent!r})
from rank.before import cpu_shims
cpu_shims.install(["torch", "rsl_rl", "isaaclab"])
if os.environ.get("BENCH_HOOKS") == "1":
    from rank.during import train_hooks
    train_hooks.install(["rsl_rl"])
sys.argv = ["isaaclab", *sys.argv[1:]]
runpy.run_module("isaaclab", run_name="__main__", alter_sys=True)
"""


def train_args(num_envs: int, iterations: int) -> list[str]:
    return ["train", "--rl_library", "rsl_rl", "--task=Isaac-Cartpole", "--distributed",
            "--run_timestamp=hpctrain", "--seed=42", "--num_envs", str(num_envs),
            "--max_iterations", str(iterations)]


def wait_for(path: Path, text: str, proc: subprocess.Popen, timeout: float = 600) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if text in path.read_text(errors="replace"):
                return time.monotonic()
        except OSError:
            pass
        if proc.poll() is not None and proc.returncode != 0:
            raise RuntimeError(f"{proc.args[:3]} exited {proc.returncode}: see {path}")
        time.sleep(0.01)
    raise RuntimeError(f"no '{text}' in {path} within {timeout} s")


def by_hand(work: Path, wrapper: Path, num_envs: int, iterations: int,
            hooks: bool = False) -> tuple[float, float]:
    """2 ranks under torchrun by hand: (seconds to rank 0's first iteration, rank 0's mean
    iteration time from Isaac Lab's own "Training time": the agent's set-up and rsl-rl's learn
    loop over the iterations, 10 ms resolution on the whole)."""
    work.mkdir(parents=True)
    log = work / "out.log"
    cmd = [str(PY), "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
           "--local-ranks-filter=0", str(wrapper), *train_args(num_envs, iterations)]
    env = dict(os.environ, **ENV, HPCTRAIN_CPU_MODE_QUIET="1", BENCH_HOOKS="1" if hooks else "0",
               HPCTRAIN_RUN_DIR=str(work))
    t0 = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=work, stdout=out, stderr=subprocess.STDOUT, env=env)
        first = wait_for(log, FIRST, proc)
        proc.wait(timeout=900)
    assert proc.returncode == 0, log
    if hooks:  # the hooks' progress records: they ran
        assert list(work.glob("status/progress-*.json")), "the hooks reported nothing"
    [total] = [float(t) for t in TRAINING_TIME.findall(log.read_text(errors="replace"))]
    return first - t0, total / iterations


def through_hpctrain(work: Path, num_envs: int, iterations: int) -> float:
    work.mkdir(parents=True)
    job = {"name": "bench-isaac3", "library": "rsl_rl", "task": "Isaac-Cartpole",
           "isaaclab": str(VENV), "isaaclab_assets": ENV["ISAACSIM_ASSET_ROOT"], "seed": 42,
           "args": ["--num_envs", str(num_envs), "--max_iterations", str(iterations)],
           "env": {k: v for k, v in ENV.items() if k != "ISAACSIM_ASSET_ROOT"},
           "resources": {"nodes": 1, "procs_per_node": 2}, "runs_dir": str(work / "runs")}
    path = work / "job.json"
    path.write_text(json.dumps(job))
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "hpctrain", "submit", str(path), "--wait"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, HPCTRAIN_HOME=str(work / "home")))
    deadline = time.monotonic() + 120
    while not list((work / "runs").glob("bench-isaac3/*/logs/rank-0.log")):
        if time.monotonic() > deadline or proc.poll() not in (None, 0):
            raise RuntimeError(f"no rank-0 log: {proc.communicate()[0]}")
        time.sleep(0.01)
    [log] = (work / "runs").glob("bench-isaac3/*/logs/rank-0.log")
    first = wait_for(log, FIRST, proc)
    out = proc.communicate(timeout=600)[0]
    assert proc.returncode == 0, out
    return first - t0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--envs", type=int, default=32)
    p.add_argument("--iterations", type=int, default=40, help="of the hooks' row")
    p.add_argument("--markdown", type=Path)
    a = p.parse_args()
    if not (VENV / ".hpctrain-isaaclab-3.0.0").exists():
        print("bench/isaaclab.py: run scripts/install-isaaclab.sh first", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        wrapper = tmp / "hand_rank.py"
        wrapper.write_text(WRAPPER.format(rank_parent=str(ROOT / "hpctrain")))
        start = {"hpctrain": [], "hand": []}
        iters = {"hooks": [], "plain": []}
        for rep in range(a.reps + 1):  # rep 0: the warm-up, not counted
            for name in ("hand", "hpctrain"):
                work = tmp / f"start-{name}-{rep}"
                s = by_hand(work, wrapper, a.envs, 3)[0] if name == "hand" else through_hpctrain(work, a.envs, 3)
                if rep:
                    start[name].append(s)
                print(f"rep {rep} start {name}: {s:.2f} s", flush=True)
            for name in ("plain", "hooks"):
                _, t = by_hand(tmp / f"iter-{name}-{rep}", wrapper, a.envs, a.iterations,
                               hooks=name == "hooks")
                if rep:
                    iters[name].append(t)
                print(f"rep {rep} iteration {name}: {t * 1000:.1f} ms", flush=True)
    ms, mh = statistics.median(start["hpctrain"]), statistics.median(start["hand"])
    ih, ip = statistics.median(iters["hooks"]), statistics.median(iters["plain"])
    rows = [
        "| row | hpctrain | by hand | ratio | target |",
        "|---|---|---|---|---|",
        f"| command to rank 0's first iteration, 2 local ranks (median of {a.reps}) | {ms:.2f} s "
        f"({min(start['hpctrain']):.2f}–{max(start['hpctrain']):.2f}) | {mh:.2f} s "
        f"({min(start['hand']):.2f}–{max(start['hand']):.2f}) | {ms / mh:.3f} | ≤ 1.05 |",
        f"| rank 0's iteration of 2, with / without the train hooks (median of {a.reps} runs of "
        f"{a.iterations}) "
        f"| {ih * 1000:.1f} ms | {ip * 1000:.1f} ms | {ih / ip:.3f} | ≤ 1.01 |",
    ]
    text = "\n".join(rows)
    print(text)
    if a.markdown:
        a.markdown.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
