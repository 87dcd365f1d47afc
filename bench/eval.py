"""`hpctrain eval RUN --checkpoint all` against the same plays run by hand (issue 52: an evaluation
array over N checkpoints costs <= 1.1x the sum of N evaluations by hand).

One real Isaac Lab 3.0 run (rsl_rl, Isaac-Cartpole, Newton on the CPU, 4 iterations saving
model_0 and model_3) is trained once on the local site. Then, interleaved, each repetition:
  - hpctrain: `hpctrain eval RUN --checkpoint all --episodes 8 --steps 320 --wait` (one job array:
    per checkpoint a one-rank job under torchrun, the bootstrap, Isaac Lab's `benchmark play`, the
    record written into the run);
  - by hand: the same `python -m isaaclab benchmark play ...` command lines, read from the array's
    own task records (bootstrap.json: what follows `--`, with the CPU overrides), one after the
    other.
Cost is CPU time, the machine's own count (/proc/stat: every process, the job's included, however
detached), with nothing else running; wall time is shown beside it (the array runs its tasks two
at a time here, so its wall time is not what is compared). Needs scripts/install-isaaclab.sh's venv.

    python bench/eval.py [--reps 3] [--markdown out.md]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv-isaaclab"
ENV = {"ISAACSIM_ASSET_ROOT": str(VENV / "assets"), "WARP_CACHE_PATH": str(VENV / "cache" / "warp"),
       "XDG_CACHE_HOME": str(VENV / "cache" / "xdg")}
HPCTRAIN = [sys.executable, "-m", "hpctrain"]
TICK = os.sysconf("SC_CLK_TCK")


def busy_seconds() -> float:
    """CPU seconds the whole machine has spent busy (user, nice, system, irq, softirq, steal)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq + steal) / TICK


def measured(fn) -> tuple[float, float]:
    cpu, wall = busy_seconds(), time.monotonic()
    fn()
    return busy_seconds() - cpu, time.monotonic() - wall


def train(work: Path, env: dict) -> Path:
    job = {"name": "bench-eval", "site": "local", "library": "rsl_rl", "task": "Isaac-Cartpole",
           "isaaclab": str(VENV), "isaaclab_assets": str(VENV / "assets"),
           "python": str(VENV / "bin" / "python"), "seed": 42,
           "args": ["--num_envs", "32", "--max_iterations", "4", "agent.save_interval=3"],
           "resources": {"procs_per_node": 1, "time": "00:20:00"},
           "env": {k: v for k, v in ENV.items() if k != "ISAACSIM_ASSET_ROOT"}}
    path = work / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    out = subprocess.run([*HPCTRAIN, "submit", str(path), "--wait"], env=env, cwd=ROOT,
                         capture_output=True, text=True, check=True, timeout=900).stdout
    line = next(l for l in out.splitlines() if l.startswith("run directory: "))
    return Path(line.removeprefix("run directory: ").strip())


def by_array(run: Path, env: dict) -> Path:
    out = subprocess.run([*HPCTRAIN, "eval", run.name, "--checkpoint", "all", "--episodes", "8",
                          "--steps", "320", "--wait"], env=env, cwd=ROOT, capture_output=True,
                         text=True, check=True, timeout=1800).stdout
    line = next(l for l in out.splitlines() if l.startswith("run directory: "))
    return Path(line.removeprefix("run directory: ").strip())


def hand_commands(eval_dir: Path) -> list[list[str]]:
    """Each task's play as its rank ran it: the run's interpreter, what follows `--`, then the
    CPU overrides the rank side appends (--cpu-arg=...)."""
    commands = []
    for task in sorted((eval_dir / "tasks").iterdir(), key=lambda p: int(p.name)):
        boot = json.loads((task / "bootstrap.json").read_text())
        program = boot["program"]
        cut = program.index("--")
        cpu = [a.removeprefix("--cpu-arg=") for a in program[:cut] if a.startswith("--cpu-arg=")]
        commands.append([str(VENV / "bin" / "python"), *program[cut + 1:], *cpu])
    return commands


def by_hand(commands: list[list[str]], work: Path, env: dict) -> None:
    for i, command in enumerate(commands):
        out = work / f"hand-{i}"
        out.mkdir(parents=True, exist_ok=True)
        command = [a if not a.startswith("--output_path=") else f"--output_path={out}"
                   for a in command]
        with open(out / "play.log", "w") as log:
            subprocess.run(command, env=env, cwd=out, stdout=log, stderr=subprocess.STDOUT,
                           check=True, timeout=900)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-eval-") as tmp:
        work = Path(tmp)
        env = {**os.environ, **ENV, "HPCTRAIN_HOME": str(work / "home"),
               "HPCTRAIN_RUNS_DIR": str(work / "runs")}
        run = train(work, env)
        eval_dir = by_array(run, env)  # untimed warm-up of both, and the commands to run by hand
        commands = hand_commands(eval_dir)
        by_hand(commands, work / "warm", env)
        rows = []
        for rep in range(args.reps):
            timed = {}
            order = ["hpctrain", "hand"] if rep % 2 == 0 else ["hand", "hpctrain"]
            for who in order:
                if who == "hpctrain":
                    timed[who] = measured(lambda: by_array(run, env))
                else:
                    timed[who] = measured(lambda: by_hand(commands, work / f"rep-{rep}", env))
            rows.append(timed)
            print(f"rep {rep}: array {timed['hpctrain'][0]:.1f} core-s ({timed['hpctrain'][1]:.1f} s), "
                  f"by hand {timed['hand'][0]:.1f} core-s ({timed['hand'][1]:.1f} s), ratio "
                  f"{timed['hpctrain'][0] / timed['hand'][0]:.3f}", flush=True)
    ratio = statistics.median(r["hpctrain"][0] / r["hand"][0] for r in rows)
    table = ["| checkpoints | array (core-s, median) | by hand (core-s, median) | array ÷ by hand "
             "(median of reps) | array wall | by hand wall |", "|---|---|---|---|---|---|",
             f"| {len(commands)} | {statistics.median(r['hpctrain'][0] for r in rows):.1f} | "
             f"{statistics.median(r['hand'][0] for r in rows):.1f} | **{ratio:.3f}** | "
             f"{statistics.median(r['hpctrain'][1] for r in rows):.1f} s | "
             f"{statistics.median(r['hand'][1] for r in rows):.1f} s |"]
    print("\n".join(table))
    if args.markdown:
        args.markdown.write_text("\n".join(table) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
