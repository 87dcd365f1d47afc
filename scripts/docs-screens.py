#!/usr/bin/env python3
"""The manual's screens: captured from real runs, and checked against what the commands print now.

    scripts/docs-screens.py                       capture the local screens into docs/
    scripts/docs-screens.py --site localcluster   also the preempted run's status (needs the
                                                  local Slurm cluster: tests/cluster/up.sh)
    scripts/docs-screens.py --check [--site S]    capture again into a scratch directory and
                                                  compare with what docs/ holds (the docs tests)

What it makes:
  docs/screens/status-running.txt    `hpctrain status RUN --ranks` of the main example while it trains
  docs/screens/status-preempted.txt  `hpctrain status RUN` of examples/resumable_train.yaml on two
                                     Slurm nodes, preempted (USR2 to the batch shell, as ahead of a
                                     time limit), requeued and training again from its checkpoint
  docs/img/cartpole_ppo_curves.png   `hpctrain plot RUN` of the main example's run
  docs/img/render_scaling.png        bench/render_scaling.png (bench/run --plot makes it)
  docs/img/resumable_train_curves.png  examples/resumable_train_curves.png

A capture shows run ids, times and rewards that differ every run; --check compares what must not
differ: the lines `status` prints (their labels, in order), the state, and that the ranks report
progress; the PNG is a PNG of the same size; the copies are byte-equal to their sources.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
COPIES = {"img/render_scaling.png": ROOT / "bench" / "render_scaling.png",
          "img/resumable_train_curves.png": ROOT / "examples" / "resumable_train_curves.png"}


class Shell:
    """hpctrain in a scratch directory with the examples, a private index and runs."""

    def __init__(self, work: Path):
        self.work = work
        shutil.copytree(ROOT / "examples", work / "examples", dirs_exist_ok=True)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("HPCTRAIN_", "WANDB_"))}
        self.env.update(HPCTRAIN_HOME=str(work / "home"), HPCTRAIN_RUNS_DIR=str(work / "runs"),
                        COLUMNS="80")

    def __call__(self, *args: str, check: bool = True) -> str:
        proc = subprocess.run([sys.executable, "-m", "hpctrain", *args], cwd=self.work, env=self.env,
                              capture_output=True, text=True, timeout=600)
        if check and proc.returncode != 0:
            raise SystemExit(f"hpctrain {' '.join(args)} failed:\n{proc.stdout}{proc.stderr}")
        return proc.stdout

    def submit(self, *args: str) -> tuple[str, str]:
        out = self(*args)
        m = re.search(r"run (\S+)\s+job (\S+)", out)
        if not m:
            raise SystemExit(f"no run in the submit's output:\n{out}")
        return m.group(1), m.group(2)

    def shown(self, text: str) -> str:
        """The page's version: paths relative to the directory the commands ran in."""
        return text.replace(str(self.work) + "/", "").rstrip() + "\n"


def until(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise SystemExit(f"timed out after {timeout:g} s waiting for {what}")


def block(command: str, output: str) -> str:
    return f"```console\n$ {command}\n{output}```\n"


def running_screen(sh: Shell) -> tuple[str, str]:
    """The main example while it trains: state RUNNING, a progress line, each rank's progress."""
    run, _ = sh.submit("submit", "examples/cartpole_ppo.yaml", "--set", "args=[--updates,40]")

    def progressing():
        text = sh("status", run, "--ranks")
        return text if re.search(r"^state +RUNNING", text, re.M) and re.search(r"^progress +step ([5-9]|[1-9][0-9])", text, re.M) \
            and re.search(r"^ +1 ", text, re.M) else None
    text = until(progressing, 120, "the example to report progress from both ranks")
    until(lambda: re.search(r"^state +COMPLETED", sh("status", run), re.M), 300, "the example to end")
    return run, block("hpctrain status RUN --ranks", sh.shown(text))


def preempted_screen(sh: Shell, site: str) -> str:
    """examples/resumable_train.yaml on two nodes, preempted after its first checkpoint, requeued,
    training again: `status` shows the requeue and the attempt."""
    run, job = sh.submit("submit", "examples/resumable_train.yaml", "--site", site,
                         "--set", f"python={sys.executable}",
                         "--set", "args=[--iterations,60,--sleep,0.5,--save-every,5]")
    run_dir = sh.work / "runs" / "resumable-train" / run
    until(lambda: sorted((run_dir / "checkpoints").glob("model_*.pt")), 240, "a first checkpoint")
    subprocess.run(["scancel", "--signal=USR2", "--batch", job], check=True)

    def resumed():
        text = sh("status", run)
        return text if re.search(r"^state +RUNNING requeued", text, re.M) and \
            re.search(r"^progress .*attempt 2", text, re.M) else None
    text = until(resumed, 300, "the run to be requeued and train again")
    sh("cancel", run)
    return block("hpctrain status RUN", sh.shown(text))


def labels(screen: str) -> list[str]:
    """What a screen's lines are, without what changes from run to run."""
    out = []
    for line in screen.splitlines():
        if line.startswith("$ ") or line.startswith("```"):
            out.append(line)
        elif line.startswith(("job name ", "state ")):
            out.append(" ".join(line.split()[:2]))  # "job name", and the state's word
        elif re.match(r"^[a-z]", line):
            out.append(line.split()[0])
        elif re.match(r"^ +[0-9]+ ", line):
            out.append("rank-row")
        elif line.strip():
            out.append(line.strip().split()[0])
    return out


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()[:24]
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise SystemExit(f"{path} is not a PNG")
    return struct.unpack(">II", data[16:24])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with docs/ instead of writing it")
    ap.add_argument("--site", help="a Slurm site for the preempted run (localcluster)")
    ap.add_argument("--workdir", help="scratch directory (default: a temporary one)")
    args = ap.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="docs-screens-")) / "screens"
    sh = Shell(work)
    made: dict[str, bytes] = {}
    run, made["screens/status-running.txt"] = (lambda r: (r[0], r[1].encode()))(running_screen(sh))
    plot_out = work / "curves.png"
    sh("plot", run, "--out", str(plot_out))
    made["img/cartpole_ppo_curves.png"] = plot_out.read_bytes()
    for name, source in COPIES.items():
        made[name] = source.read_bytes()
    if args.site:
        made["screens/status-preempted.txt"] = preempted_screen(sh, args.site).encode()

    if not args.check:
        for name, data in made.items():
            (DOCS / name).parent.mkdir(parents=True, exist_ok=True)
            (DOCS / name).write_bytes(data)
            print(f"wrote docs/{name}")
        return 0

    problems = []
    for name, data in made.items():
        page = DOCS / name
        if not page.exists():
            problems.append(f"docs/{name} is missing: run scripts/docs-screens.py")
        elif name in COPIES:
            if page.read_bytes() != data:
                problems.append(f"docs/{name} differs from {COPIES[name].relative_to(ROOT)}")
        elif name.endswith(".png"):
            fresh = work / "fresh.png"
            fresh.write_bytes(data)
            if png_size(page) != png_size(fresh):
                problems.append(f"docs/{name}: {png_size(page)} pixels, `hpctrain plot` now draws {png_size(fresh)}")
        elif labels(page.read_text()) != labels(data.decode()):
            problems.append(f"docs/{name} no longer matches what the command prints:\n"
                            f"--- in docs\n{page.read_text()}--- now\n{data.decode()}")
    # The preempted screen needs a Slurm cluster; without one its lines are still checked
    # against what `status` prints (every label it shows must be one status prints today).
    preempted = DOCS / "screens" / "status-preempted.txt"
    if "screens/status-preempted.txt" not in made:
        if not preempted.exists():
            problems.append("docs/screens/status-preempted.txt is missing: run "
                            "scripts/docs-screens.py --site localcluster")
        else:
            known = set(labels(made["screens/status-running.txt"].decode()))
            text = preempted.read_text()
            if not re.search(r"^state +RUNNING requeued 1x", text, re.M) or "attempt 2" not in text:
                problems.append("docs/screens/status-preempted.txt does not show a requeued run's second attempt")
            unknown = [lab for lab in labels(text) if lab.split()[0] not in {k.split()[0] for k in known}
                       and not lab.startswith("$")]
            if unknown:
                problems.append(f"docs/screens/status-preempted.txt shows lines status no longer prints: {unknown}")
    for p in problems:
        print(p)
    print("screens: " + ("up to date" if not problems else f"{len(problems)} problem(s)"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
