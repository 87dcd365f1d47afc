"""One evaluation of one checkpoint, on the node: run the library's bounded play (or the
program's own command), read what it reports, write one record into the trained run.

Run by the bootstrap as the evaluation job's program (`-m _hpctrain_rank.after.evaluate ARGS
-- COMMAND...`), under the run's interpreter, so stdlib only. A program under the plain contract
runs in this process, as the bootstrap runs a training (its CPU shims and `hpctrain_progress`
are already here); a library's play is a child process in its own folder. Either way the result
is read back from a file it writes, and a crash or a missing file is a record with status
"failed" and the reason, not a silent gap in the curve.

The record (RUN_DIR/eval/<checkpoint key>.json) is what `status`, `report`, `plot --eval` and
`eval --checkpoint best` read back (hpctrain/runs/evaluations.py checks and bounds it).
"""
from __future__ import annotations

import argparse
import glob
import json
import math
import os
import re
import runpy
import signal
import subprocess
import sys

from ..records import now, read_json, write_json

EVAL_DIR = "eval"
FORMAT = 1
# What a program or Isaac Lab writes as its result is bounded like any record.
MAX_RESULT = 1 << 20
RESULT_NAME = "result.json"


def record_name(checkpoint: str) -> str:
    """The record's file name for a checkpoint's path relative to its run: one per checkpoint,
    readable, and a name (no folder, no dot first)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", checkpoint).lstrip(".")[:200] + ".json"


def _number(value, lo: float = -math.inf, hi: float = math.inf):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) and lo <= value <= hi else None


def _count(value):
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def from_program(out_dir: str) -> dict:
    """The plain contract: the program wrote JSON to $HPCTRAIN_EVAL_RESULT (docs/evaluate.md)."""
    path = os.path.join(out_dir, RESULT_NAME)
    try:
        data = read_json(path, MAX_RESULT)
    except FileNotFoundError:
        raise ValueError(f"the program wrote no result to $HPCTRAIN_EVAL_RESULT ({path}): when "
                         "$HPCTRAIN_EVAL_CHECKPOINT is set it evaluates that checkpoint and writes "
                         "its mean_return there (docs/evaluate.md)") from None
    if not isinstance(data, dict):
        raise ValueError(f"$HPCTRAIN_EVAL_RESULT holds {type(data).__name__}, not a JSON object")
    mean = _number(data.get("mean_return"))
    if mean is None:
        raise ValueError("$HPCTRAIN_EVAL_RESULT has no finite 'mean_return'")
    return {"mean_return": mean, "episode_length": _number(data.get("episode_length"), 0),
            "success_rate": _number(data.get("success_rate"), 0, 1),
            "episodes": _count(data.get("episodes"))}


def from_isaaclab_benchmark(out_dir: str) -> dict:
    """`isaaclab benchmark play`'s PlayBundle (its default 'schema' format): reward and
    ep_length are mean/std over the completed episodes, success_rate None where the task has
    none."""
    found = sorted(glob.glob(os.path.join(glob.escape(out_dir), "*.json")),
                   key=lambda p: os.path.getmtime(p))
    if not found:
        raise ValueError(f"isaaclab benchmark play wrote no result under {out_dir}")
    data = read_json(found[-1], MAX_RESULT)
    if not isinstance(data, dict):
        raise ValueError(f"{found[-1]} is not a play bundle")
    reward, length = data.get("reward"), data.get("ep_length")
    if not isinstance(reward, dict):
        raise ValueError("no episode completed within the steps played: raise --steps")
    return {"mean_return": _number(reward.get("mean")),
            "episode_length": _number(length.get("mean"), 0) if isinstance(length, dict) else None,
            "success_rate": _number(data.get("success_rate"), 0, 1), "episodes": None}


def from_nothing(out_dir: str) -> dict:
    """Isaac Lab 2.x's play.py reports no metric: the record says it played, nothing more."""
    return {"mean_return": None, "episode_length": None, "success_rate": None, "episodes": None}


READERS = {"program": from_program, "isaaclab-benchmark": from_isaaclab_benchmark,
           "none": from_nothing}


def _parse(args: list[str]):
    p = argparse.ArgumentParser(prog="evaluate")
    p.add_argument("--run", required=True)  # the trained run's directory: the record goes there
    p.add_argument("--checkpoint", required=True)  # relative to --run
    p.add_argument("--iteration", type=int)
    p.add_argument("--episodes", type=int, required=True)
    p.add_argument("--steps", type=int)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--results", choices=sorted(READERS), required=True)
    p.add_argument("--out", required=True)  # this task's own folder for the command's output
    p.add_argument("--eval-run", required=True)
    p.add_argument("--method", required=True)
    p.add_argument("--seconds", type=float)  # a wall-clock bound, for a play with no step bound
    p.add_argument("--cpu-arg", action="append", default=[])  # appended in CPU mode
    p.add_argument("--in-out", action="store_true")  # the command runs in --out
    p.add_argument("command", nargs=argparse.REMAINDER)
    ns = p.parse_args(args)
    if ns.command[:1] == ["--"]:
        ns.command = ns.command[1:]
    return ns


def _argv(command: list[str]) -> list[str]:
    # As the bootstrap runs a program: a script or -m module under this interpreter.
    if command[0] == "-m" or command[0].endswith(".py"):
        return [sys.executable, *command]
    return list(command)


def in_process(command: list[str]) -> int:
    """Run a Python program here, as the bootstrap does (rank/before/bootstrap.run_program)."""
    if command[0] == "-m":
        sys.argv = command[1:]
        run = lambda: runpy.run_module(command[1], run_name="__main__", alter_sys=True)  # noqa: E731
    else:
        sys.argv = list(command)
        sys.path.insert(0, os.path.dirname(os.path.abspath(command[0])))
        run = lambda: runpy.run_path(command[0], run_name="__main__")  # noqa: E731
    try:
        run()
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    return 0


def run_command(ns) -> tuple[int, str]:
    """The command's exit status and, when it ended badly, why."""
    command = list(ns.command)
    if os.environ.get("HPCTRAIN_CPU_MODE") == "1":
        command += [a for a in ns.cpu_arg if a not in command]
    env = dict(HPCTRAIN_EVAL_CHECKPOINT=os.path.join(ns.run, ns.checkpoint),
               HPCTRAIN_EVAL_EPISODES=str(ns.episodes), HPCTRAIN_EVAL_SEED=str(ns.seed),
               HPCTRAIN_EVAL_RESULT=os.path.join(ns.out, RESULT_NAME))
    if ns.steps is not None:
        env["HPCTRAIN_EVAL_STEPS"] = str(ns.steps)
    print(f"hpctrain: evaluate {ns.checkpoint} ({ns.method}): {' '.join(command)}",
          file=sys.stderr, flush=True)
    if not ns.in_out and (command[0] == "-m" or command[0].endswith(".py")):
        os.environ.update(env)
        status = in_process(command)
        return status, (f"the program exited with status {status} (see this task's log)"
                        if status else "")
    child = subprocess.Popen(_argv(command), env=dict(os.environ, **env),
                             cwd=ns.out if ns.in_out else None)

    def forward(signum, _frame):  # the job's end (scancel, a time limit) ends the play too
        child.send_signal(signum)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
        signal.signal(sig, forward)
    try:
        status = child.wait(timeout=ns.seconds)
    except subprocess.TimeoutExpired:
        # 2.x's play.py runs until its window closes: the wall-clock bound is its only end.
        child.terminate()
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        return 0, ""
    if status != 0:
        return status, f"the command exited with status {status} (see this task's log)"
    return 0, ""


def main(args: list[str]) -> int:
    ns = _parse(args)
    os.makedirs(ns.out, exist_ok=True)
    status, why = run_command(ns)
    record = {"format": FORMAT, "checkpoint": ns.checkpoint, "iteration": ns.iteration,
              "method": ns.method, "seed": ns.seed, "episodes_asked": ns.episodes,
              "steps": ns.steps, "eval_run": ns.eval_run, "evaluated": now(),
              "status": "failed", "error": why or None,
              "mean_return": None, "episode_length": None, "success_rate": None, "episodes": None}
    if not why:
        try:
            record.update(READERS[ns.results](ns.out))
            record["status"] = "ok"
        except (OSError, ValueError) as exc:
            status, record["error"] = 1, str(exc)[:500]
    # Written whole, never through a link planted in the run (records.replacing).
    write_json(os.path.join(ns.run, EVAL_DIR, record_name(ns.checkpoint)), record, root=ns.run)
    shown = {k: record[k] for k in ("status", "mean_return", "episode_length", "success_rate")}
    print(f"hpctrain: evaluated {ns.checkpoint}: {json.dumps(shown)}"
          + (f" - {record['error']}" if record["error"] else ""), file=sys.stderr, flush=True)
    return status or (1 if record["status"] != "ok" else 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
