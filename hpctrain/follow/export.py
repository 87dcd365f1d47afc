"""`hpctrain export RUN [--checkpoint latest|best|N|PATH]`: a checkpoint's policy as ONNX and
TorchScript in RUN/exports/<checkpoint>/, checked against the checkpoint's own policy.

This side picks the checkpoint (the run's own checkpoint patterns from bootstrap.json, every
match a regular file reached through no link; best: the best by evaluation) and starts the
exporter, rank/after/export.py, under the run's interpreter: torch, onnx and the RL library are
imported there, never here. A run of this machine outside a container: a subprocess (run.json's
extra.python, the job's `env:`), this hpctrain's copy of the rank side (the run directory's may
predate export, and is data); it answers in seconds, with no job's bookkeeping. Any other run:
a 1-node job derived from the run (job/export.py) on its site, in its container (the CLI
submits it). What comes back is read as untrusted: the exporter's last line (the child's output,
or a bounded tail of the job's) and exports/NAME/export.json, bounded, its files checked
against the record.
"""
from __future__ import annotations

import glob
import json
import os
import re
import stat
import subprocess
import tempfile
from pathlib import Path

import msgspec

from ..backends import for_run
from ..errors import HpctrainError
from ..rank.after.export import MARK, NAME, REFUSED
from ..rank.end.checkpoints import being_written
from ..rank.records import RANK_FOLDER
from ..runs import evaluations
from ..runs.records import Run
from ..runs.untrusted import MAX_RECORD, Unreadable, read_regular
from .attach import job_python
from .operate import resolve

TIMEOUT_S = 900  # an export takes seconds; a hung interpreter must not hold the command
MAX_OUTPUT = 1 << 20  # the exporter's output read back (its last line is the result)
MAX_PATTERNS, MAX_MATCHES = 16, 100_000
MAX_SAMPLES = 4096
_NUMBER = (re.compile(r"_ep_([0-9]{1,12})"), re.compile(r"_([0-9]{1,12})\.[A-Za-z]{1,8}$"))
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


class Chosen(msgspec.Struct, frozen=True):
    """What an export exports: the run, its library, the checkpoint (relative to the run), the
    folder name under exports/, the check's sample count (None: the exporter's default)."""
    run: Run
    library: str
    checkpoint: str
    name: str
    samples: int | None
    rule: str  # how the checkpoint was chosen, in words


def choose(ref: str, checkpoint: str = "latest", samples: int | None = None) -> Chosen:
    """The refusals that need no interpreter, then the checkpoint."""
    if samples is not None and not 1 <= samples <= MAX_SAMPLES:
        raise HpctrainError(f"--samples {samples}: the check runs 1 to {MAX_SAMPLES} observations",
                            fix="leave it out (64) or give a number in that range")
    run = resolve(ref)
    library = run.record.library or "command"
    if library in REFUSED:
        what, fix = REFUSED[library]
        raise HpctrainError(f"run {run.id} ({library}): {what}", fix=fix)
    chosen, rule = pick_checkpoint(run, checkpoint)
    return Chosen(run, library, chosen, export_name(chosen), samples, rule)


def in_process(run: Run) -> bool:
    """True where the exporter runs here, as a child of this command: a run of this machine
    outside a container. Elsewhere it is a job derived from the run (job/export.py), on the
    run's site, in its container."""
    return for_run(run).runs_here and not _job(run).get("container")


def export(ref: str, checkpoint: str = "latest", samples: int | None = None) -> dict:
    """Export RUN's chosen checkpoint here (a local run outside a container); the record
    (export.json) with `folder` and `files`' paths."""
    return export_here(choose(ref, checkpoint, samples))


def export_here(c: Chosen) -> dict:
    """The exporter as a child of this command; its record, checked."""
    if not in_process(c.run):
        raise HpctrainError(f"run {c.run.id} ran on its site's nodes or in a container: its "
                            "export is a job derived from the run",
                            fix=f"hpctrain export {c.run.id} --wait")
    result = _run(c.run, exporter_command(c.run, c.library, c.checkpoint, c.name, c.samples))
    if "error" in result:
        raise failed(c, result)
    return read_export(c.run, c.name)


def failed(c: Chosen, result: dict) -> HpctrainError:
    """The exporter's {"error", "fix"} as the command's error."""
    error = str(result["error"])[:2000]
    return HpctrainError(f"run {c.run.id}: "
                         f"{error if error.startswith(c.checkpoint) else f'{c.checkpoint}: {error}'}",
                         fix=str(result.get("fix") or "see the message")[:2000])


def result_line(tail: str) -> dict | None:
    """The exporter's last `hpctrain-export: {json}` line in its output's tail, if any."""
    for line in reversed(tail.splitlines()):
        if line.startswith(MARK):
            try:
                result = json.loads(line[len(MARK):])
            except ValueError:
                return None
            return result if isinstance(result, dict) else None
    return None


def job_result(job_run: Run) -> dict | None:
    """An export job's result: the last `hpctrain-export:` line in a bounded tail of its rank's
    log (the bootstrap's tee), else of the job's own output (where a rank that never started
    leaves its words). The run is the export job's, read as untrusted (regular files only)."""
    from ..runs.untrusted import open_regular
    places = [job_run.path / "logs" / "rank-0.log", *for_run(job_run).output_files(job_run, None)]
    for path in places[:4]:
        if _plain_file(job_run.path, os.path.relpath(path, job_run.path)) is None:
            continue
        try:
            with open_regular(path) as f:
                size = f.seek(0, os.SEEK_END)
                f.seek(max(0, size - MAX_OUTPUT))
                tail = f.read(MAX_OUTPUT).decode("utf-8", errors="replace")
        except (OSError, Unreadable):
            continue
        result = result_line(tail)
        if result is not None:
            return result
    return None


def exporter_command(run: Run, library: str, checkpoint: str, name: str,
                     samples: int | None = None) -> list[str]:
    """The run's interpreter on this hpctrain's rank side: `python RANK export ...`."""
    return [*job_python(run), RANK_FOLDER, "export", str(run.path), library, checkpoint, name,
            *([str(samples)] if samples else [])]


def checkpoints(run: Run) -> list[tuple[str, os.stat_result]]:
    """The run's checkpoints (relative paths, stat), oldest first, as the bootstrap orders
    them when it resumes: modification time, then the numbers in the name."""
    patterns = _patterns(run)
    found: dict[str, os.stat_result] = {}
    for pattern in patterns:
        for path in glob.iglob(os.path.join(glob.escape(str(run.path)), pattern), recursive=True):
            if len(found) >= MAX_MATCHES:
                break
            rel = os.path.relpath(path, run.path)
            st = _plain_file(run.path, rel)
            if st is not None and st.st_size and not being_written(os.path.basename(rel)):
                found[rel] = st
    return sorted(found.items(), key=lambda kv: (kv[1].st_mtime_ns, _natural(kv[0])))


def pick_checkpoint(run: Run, choice: str) -> tuple[str, str]:
    """latest, best (by evaluation), a number (the iteration, epoch or timestep in the
    checkpoint's name), or a path inside the run directory; and the rule, in words."""
    if choice == "best":
        return best_checkpoint(run, f"hpctrain export {run.id} --checkpoint latest")
    if choice not in ("latest",) and not choice.isdigit():
        rel = os.path.relpath(os.path.abspath(choice), run.path) if os.path.isabs(choice) else \
            os.path.normpath(choice)
        if rel.split(os.sep)[0] == os.pardir:
            raise HpctrainError(f"{choice}: not inside run {run.id}'s directory {run.path}",
                                fix="name a checkpoint of the run (or latest, or its number)")
        if _plain_file(run.path, rel) is None:
            raise HpctrainError(f"{choice}: not a regular file of run {run.id} (missing, or "
                                "reached through a symbolic link)",
                                fix=f"hpctrain export {run.id} --checkpoint latest")
        return rel, "the checkpoint named"
    found = checkpoints(run)
    if not found:
        raise HpctrainError(f"run {run.id} has no checkpoint (its library's patterns: "
                            f"{', '.join(_patterns(run)) or 'none'})",
                            fix="export after the run saved one (hpctrain status shows it)")
    if choice == "latest":
        return found[-1][0], "the newest checkpoint"
    numbered = [rel for rel, _st in found if _number(rel) == int(choice)]
    if not numbered:
        have = sorted({n for n in (_number(rel) for rel, _st in found) if n is not None})
        raise HpctrainError(f"run {run.id} has no checkpoint numbered {choice}",
                            fix=f"its checkpoints: {', '.join(map(str, have[-20:])) or 'unnumbered'}"
                            " (or --checkpoint latest)")
    return numbered[-1], f"the checkpoint numbered {choice}"


def best_checkpoint(run: Run, other: str) -> tuple[str, str]:
    """The checkpoint with the best evaluation (runs/evaluations.best), still a regular file of
    the run. Never a training reward: a policy to deploy is chosen by how it plays, and `eval`
    measures that with a fixed seed."""
    done, _problems = evaluations.read(run.path)
    top = evaluations.best(done)
    if top is None:
        raise HpctrainError(f"run {run.id} has no evaluation: 'best' is the best checkpoint by "
                            "evaluation (a training reward is not one)",
                            fix=f"hpctrain eval {run.id} --checkpoint all --wait first (or {other})")
    rel = os.path.normpath(top.checkpoint)
    if os.path.isabs(rel) or rel.split(os.sep)[0] == os.pardir or _plain_file(run.path, rel) is None:
        raise HpctrainError(f"the best evaluated checkpoint {top.checkpoint} of run {run.id} is "
                            "no longer a regular file of the run",
                            fix=f"evaluate again: hpctrain eval {run.id} --checkpoint all")
    return rel, (f"best by evaluation: mean return {top.mean_return:.6g} "
                 f"(evaluated {top.evaluated})")


def export_name(checkpoint: str) -> str:
    """exports/<this>/: the checkpoint's file name without its suffix, as a plain name."""
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", Path(checkpoint).stem)[:120]
    return stem if NAME.fullmatch(stem) else f"c{stem}"[:128]


def read_export(run: Run, name: str) -> dict:
    """exports/NAME/export.json, checked: its files there, regular, of the sizes it says."""
    folder = Path("exports") / name
    where = run.path / folder / "export.json"
    try:
        record = json.loads(read_regular(where, MAX_RECORD).decode("utf-8"))
    except (OSError, ValueError) as exc:
        raise HpctrainError(f"{where}: not an export record ({exc})",
                            fix=f"export again: hpctrain export {run.id}") from None
    files = record.get("files") if isinstance(record, dict) else None
    if not (isinstance(files, list) and files and all(isinstance(f, dict) for f in files)):
        raise HpctrainError(f"{where}: names no files", fix=f"export again: hpctrain export {run.id}")
    shown = []
    for f in files[:8]:
        fname = f.get("name")
        if not (isinstance(fname, str) and NAME.fullmatch(fname)):
            raise HpctrainError(f"{where}: a file name is not a plain name",
                                fix=f"export again: hpctrain export {run.id}")
        st = _plain_file(run.path, str(folder / fname))
        if st is None or st.st_size != f.get("bytes"):
            raise HpctrainError(f"{run.path / folder / fname}: missing, not a regular file or "
                                "not the size its export.json says",
                                fix=f"export again: hpctrain export {run.id}")
        shown.append({**f, "path": str(run.path / folder / fname)})
    return {**record, "files": shown, "folder": str(run.path / folder), "run": run.id}


def text(record: dict) -> str:
    """What export prints: the files, their sizes, the check."""
    check = record.get("check") if isinstance(record.get("check"), dict) else {}
    diffs = check.get("max_diff") if isinstance(check.get("max_diff"), dict) else {}
    lines = [f"exported {record.get('checkpoint')} of run {record.get('run')}: {record.get('policy')}"]
    width = max(len(f["path"]) for f in record["files"])
    lines += [f"  {f['path']:<{width}}  {_size(f.get('bytes'))}" for f in record["files"]]
    shown = ", ".join(f"{k} {v:.2g}" for k, v in sorted(diffs.items()) if isinstance(v, (int, float)))
    lines.append(f"  check: {check.get('samples')} sampled observations, largest difference from "
                 f"the checkpoint's policy: {shown} (tolerance {check.get('tolerance')}, relative "
                 "to actions above 1)")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- helpers
def _run(run: Run, command: list[str]) -> dict:
    env = {**os.environ, **_job_env(run)}
    with tempfile.TemporaryFile() as out:
        try:
            proc = subprocess.run(command, stdin=subprocess.DEVNULL, stdout=out,
                                  stderr=subprocess.STDOUT, cwd=run.path, env=env,
                                  timeout=TIMEOUT_S)
        except FileNotFoundError:
            raise HpctrainError(f"run {run.id}'s interpreter {command[0]!r} is not on this machine",
                                fix="export where the run's environment is") from None
        except subprocess.TimeoutExpired:
            raise HpctrainError(f"the exporter did not finish in {TIMEOUT_S} s",
                                fix="check the run's interpreter starts (its imports)") from None
        size = out.seek(0, os.SEEK_END)
        out.seek(max(0, size - MAX_OUTPUT))
        tail = out.read().decode("utf-8", errors="replace")
    result = result_line(tail)
    if result is not None:
        return result
    last = "\n".join(tail.strip().splitlines()[-6:])
    raise HpctrainError(f"the exporter under {command[0]} ended with status {proc.returncode} "
                        f"and no result:\n{last}", fix="the lines above are its last output: "
                        "the run's environment must have torch, the library, onnx, onnxscript "
                        "and onnxruntime (pip install 'hpctrain[export]' there)")


def _job(run: Run) -> dict:
    import yaml
    try:
        data = yaml.safe_load(read_regular(run.path / "job.yaml", MAX_RECORD).decode("utf-8"))
    except (OSError, ValueError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def _job_env(run: Run) -> dict[str, str]:
    """The job's own `env:` (job.yaml, as resolved at submit): names checked, values text."""
    env = _job(run).get("env")
    if not isinstance(env, dict):
        return {}
    return {k: str(v) for k, v in list(env.items())[:256]
            if isinstance(k, str) and _ENV_NAME.fullmatch(k) and isinstance(v, (str, int, float))
            and "\0" not in str(v) and len(str(v)) <= 65536}


def _patterns(run: Run) -> list[str]:
    where = run.path / "bootstrap.json"
    try:
        data = json.loads(read_regular(where, MAX_RECORD).decode("utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        raise HpctrainError(f"{where}: unreadable ({exc})", fix="restore the run's bootstrap.json") from None
    patterns = data.get("checkpoint_patterns") if isinstance(data, dict) else None
    ok = isinstance(patterns, list) and len(patterns) <= MAX_PATTERNS and all(
        isinstance(p, str) and 0 < len(p) <= 256 and not os.path.isabs(p)
        and os.pardir not in p.split("/") and "\0" not in p for p in patterns)
    if not ok:
        raise HpctrainError(f"{where}: 'checkpoint_patterns' is not a short list of patterns "
                            "inside the run directory", fix="restore the run's bootstrap.json")
    return patterns


def _plain_file(root: Path, rel: str) -> os.stat_result | None:
    """stat of ROOT/rel when every folder on the way and the file itself are no link and the
    file is regular; None otherwise."""
    path = Path(root)
    parts = Path(rel).parts
    try:
        for i, part in enumerate(parts):
            path = path / part
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                return None
            if i < len(parts) - 1 and not stat.S_ISDIR(st.st_mode):
                return None
    except (OSError, Unreadable):
        return None
    return st if stat.S_ISREG(st.st_mode) else None


def _number(rel: str) -> int | None:
    name = os.path.basename(rel)
    for pattern in _NUMBER:
        m = pattern.search(name)
        if m:
            return int(m.group(1))
    return None


def _natural(name: str) -> list:
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"([0-9]+)", name)]


def _size(n) -> str:
    if not isinstance(n, int):
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return "?"
