"""`hpctrain attach RUN`: a shell on a running job's node, beside its ranks; `--stacks`: every
rank's Python stack now, the job left running.

The backend says how a command reaches a node of the running job (Slurm: srun --jobid
--overlap; ssh sites: ssh to the host; the local site: this machine). The stacks are the hang
watcher's dump: SIGQUIT to each rank (rank/during/stacks.py), on which the bootstrap's faulthandler
writes every thread's stack to the rank's log; they are read from there. Logs and identities are
the run directory's: data, shown (control characters escaped), never run.

The signal is sent by the run's own copy of the rank side (RUN/rank: stdlib only, the version
its ranks run, on the file system the nodes share) under the job's interpreter (run.json's
extra.python, what the job script runs that copy with): the submitting machine's interpreter
and installed hpctrain need not exist on the nodes. That runs code of the run directory, so
only a copy that the user alone can change is run (own_copy).
"""
from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path
from typing import Iterator

from ..backends import for_run
from ..errors import HpctrainError
from ..rank.during.culprit import DUMP_HEAD
from ..runs.records import Run
from ..runs.untrusted import MAX_RECORD, NODE, open_regular, read_regular
from .operate import resolve

_UNPRINTABLE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
DUMP_WAIT_S = 20.0  # how long the ranks' logs may take to show their dumps


def _running(ref: str):
    run = resolve(ref)
    rec = run.record
    if rec.array_size:
        raise HpctrainError(f"run {run.id} is a sweep: attach reaches one job",
                            fix="attach to one task's run: hpctrain attach JOBID_TASK is not "
                            "supported yet; use srun --jobid JOBID_TASK --overlap --pty bash")
    if rec.extra.get("remote"):
        raise HpctrainError(f"run {run.id} was submitted through a login host: attach does not "
                            "reach through it yet", fix="run hpctrain attach on the login node")
    if rec.job_id is None:
        raise HpctrainError(f"run {run.id} has no job (yet)", fix=f"hpctrain status {run.id}")
    chosen = for_run(run)
    nodes = chosen.job_nodes(run)
    if not nodes:
        raise HpctrainError(f"run {run.id} (job {rec.job_id}) is not running: attach needs a "
                            "running job", fix=f"hpctrain status {run.id}")
    return run, chosen, nodes


def _rank_node(run: Run, rank: int) -> str:
    from ..rank.records import read_identities
    found = [i for i in read_identities(str(run.path)) if i.rank == rank]
    if not found:
        raise HpctrainError(f"run {run.id} has no rank {rank} (yet)",
                            fix=f"hpctrain status {run.id} --ranks shows its ranks")
    return found[0].node


def attach(ref: str, node: str | None = None, rank: int | None = None) -> None:
    """Replace this process with a shell on the node (never returns)."""
    run, chosen, nodes = _running(ref)
    if rank is not None:
        node = _rank_node(run, rank)
    node = node or nodes[0]
    if not NODE.fullmatch(node) or node not in nodes:
        raise HpctrainError(f"{node[:60]!r} is not a node of run {run.id}'s job",
                            fix=f"its nodes: {', '.join(nodes)}")
    command = chosen.attach_command(run, node)
    sys.stdout.flush()
    os.execvp(command[0], command)


def stacks(ref: str) -> Iterator[str]:
    """Every rank's stack, as lines: a heading per rank, then its dump."""
    from ..rank.records import read_identities
    run, chosen, nodes = _running(ref)
    ranks = sorted((i for i in read_identities(str(run.path)) if i.node in nodes),
                   key=lambda i: i.rank)
    if not ranks:
        raise HpctrainError(f"run {run.id} has no rank running yet",
                            fix=f"wait for its ranks to start: hpctrain status {run.id} --ranks")
    logs = {i.rank: run.path / "logs" / f"rank-{i.rank}.log" for i in ranks}
    before = {r: _size(p) for r, p in logs.items()}
    out = chosen.on_nodes(run, rank_command(run, "stacks", str(run.path)))
    signalled = {int(m.group(1)) for m in re.finditer(r"hpctrain stacks: rank (\d+) ", out)}
    dumps = _wait_for_dumps({r: logs[r] for r in signalled if r in logs}, before)
    for ident in ranks:
        yield f"--- rank {ident.rank} on {ident.node} (pid {ident.pid})"
        if ident.rank not in signalled:
            yield "    (not running on its node: no stack)"
        elif not dumps.get(ident.rank):
            yield f"    (no stack in {logs[ident.rank]} within {DUMP_WAIT_S:.0f} s)"
        else:
            yield from dumps[ident.rank]


def rank_command(run: Run, *args: str) -> list[str]:
    """The command that runs the run's own copy of the rank side with the job's interpreter on
    a node: through bash, so that an interpreter named `$VAR` expands there as it does in the
    job script (the one quoting filter, rendering/quoting.qcmd)."""
    from ..rendering.quoting import qcmd
    own_copy(run)
    return ["bash", "-c", f'exec {qcmd(job_python(run))} "$@"', "hpctrain-rank",
            str(run.path / "rank"), *args]


_MAX_WORDS = 32


def job_python(run: Run) -> list[str]:
    """The interpreter the job runs RUN/rank with on its nodes (run.json's extra.python, written
    at submit), checked: a few words of printable text, the first not an option. A run recorded
    before it was kept: the job's own `python:` (job.yaml), else python3 (the copy is stdlib
    only)."""
    words = run.record.extra.get("python")
    if words is None:
        words = _job_yaml_python(run.path)
    ok = isinstance(words, list) and 0 < len(words) <= _MAX_WORDS and all(
        isinstance(w, str) and 0 < len(w) <= 4096 and not _UNPRINTABLE.search(w)
        and "\n" not in w for w in words) and not words[0].startswith("-")
    if not ok:
        raise HpctrainError(f"{run.path / 'run.json'}: 'extra.python' is not an interpreter "
                            "command (a list of words)", fix="restore the run's run.json, or "
                            f"attach to a node (hpctrain attach {run.id}) and send SIGQUIT to a "
                            "rank's pid (status/rank-R.json): its log shows the stack")
    return words


def _job_yaml_python(run_path: Path) -> list[str]:
    import shlex
    import yaml
    try:
        data = yaml.safe_load(read_regular(run_path / "job.yaml", MAX_RECORD).decode("utf-8"))
        python = data.get("python") if isinstance(data, dict) else None
        return shlex.split(python) if isinstance(python, str) else ["python3"]
    except (OSError, ValueError, yaml.YAMLError):
        return ["python3"]


_MAX_ENTRIES = 1000  # files of RUN/rank looked at (hpctrain's copy has a few dozen)


def own_copy(run: Run) -> None:
    """The run directory, its run.json (which names the interpreter) and its copy of the rank
    side are the user's own, writable by nobody else, with no symbolic link inside the copy:
    anyone else who could write there could make `attach --stacks` run their code."""
    import stat
    me = os.geteuid()
    rank = run.path / "rank"
    checked = [(run.path, os.stat), (run.path / "run.json", os.lstat), (rank, os.lstat)]
    try:
        for d, dirs, files in os.walk(rank):
            checked += [(Path(d) / n, os.lstat) for n in dirs + files]
            if len(checked) > _MAX_ENTRIES:
                break
        for path, how in checked[:_MAX_ENTRIES]:
            st = how(path)
            why = ("is a symbolic link" if stat.S_ISLNK(st.st_mode) else
                   "is not yours" if st.st_uid != me else
                   "can be written by others" if st.st_mode & 0o022 else None)
            if why:
                raise HpctrainError(
                    f"attach --stacks runs run {run.id}'s own copy of hpctrain's rank side on "
                    f"its nodes, but {path} {why}: that code could be anybody's",
                    fix=f"if the run is yours: chmod -R go-w {run.path / 'rank'} (and the run "
                    f"directory); or attach to a node (hpctrain attach {run.id}) and send "
                    "SIGQUIT to a rank's pid (status/rank-R.json): its log shows the stack")
    except FileNotFoundError as exc:
        raise HpctrainError(f"run {run.id} has no {exc.filename}: attach --stacks runs the "
                            "run's own copy of the rank side", fix=f"hpctrain attach {run.id} "
                            "and send SIGQUIT to a rank's pid: its log shows the stack") from None


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _wait_for_dumps(logs: dict[int, Path], before: dict[int, int]) -> dict[int, list[str]]:
    """Each rank's dump, once its log holds one and has stopped growing."""
    dumps: dict[int, list[str]] = {}
    last: dict[int, int] = {}
    deadline = time.monotonic() + DUMP_WAIT_S
    while len(dumps) < len(logs) and time.monotonic() < deadline:
        time.sleep(0.2)
        for rank, path in logs.items():
            if rank in dumps:
                continue
            size = _size(path)
            if size == last.get(rank) and size > before[rank]:
                lines = _dump(_read_from(path, before[rank], size))
                if lines:
                    dumps[rank] = lines
            last[rank] = size
    return dumps


def _read_from(path: Path, start: int, end: int) -> str:
    try:  # a rank's log in a shared run directory: regular files only (a pipe would hang)
        with open_regular(path) as f:
            f.seek(start)
            return f.read(min(end - start, 1 << 20)).decode("utf-8", errors="replace")
    except OSError:
        return ""


def _dump(text: str) -> list[str]:
    """The faulthandler's lines in a stretch of a rank's log: from its first thread heading,
    while the lines are headings, indented frames or blank."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if DUMP_HEAD.match(line)), None)
    if start is None:
        return []
    out = []
    for line in lines[start:]:
        if not (DUMP_HEAD.match(line) or line.startswith("  ") or not line.strip()):
            break
        out.append(_UNPRINTABLE.sub(lambda m: f"\\x{ord(m.group()):02x}", line))
    while out and not out[-1].strip():
        out.pop()
    return out
