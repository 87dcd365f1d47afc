"""`hpctrain pull RUN`: a run's artifacts copied to this machine, from the cluster it ran on (over
its login node's ssh connection) or from this machine's own runs, with a manifest.

What it copies, by kind (the folders the after-training commands write into the run):
exports/ (`hpctrain export`), eval/ (`hpctrain eval`), videos/, a checkpoint (the newest by
default, found by the run's own checkpoint patterns), TensorBoard event files, and the run's
records and logs. How:

- The run directory is listed where it lives (`find -P`: regular files only, no link followed,
  the code snapshot and hpctrain's rank/ folder left out), the listing bounded in files and
  bytes, and every name held to pulled.NAME before it goes further: an odd name is skipped and
  said, never passed on.
- The selection's size is summed and refused over --max-size before anything is copied.
- A file already here that hpctrain did not pull (or that changed since) and that differs from
  the run's is refused, unless --overwrite; links here are refused whatever the flags.
- rsync copies the chosen names (--files-from, over the site's own ssh options and shared
  connection: the same command line as every other ssh of hpctrain), never a link or a special
  file, with a partial folder: a cut transfer resumes from what arrived. Each file is hashed
  as rsync finishes it, so the manifest costs little beyond the copy.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath
from typing import NamedTuple

from ..errors import HpctrainError
from ..rank import tools
from ..rank.end.checkpoints import being_written
from ..rank.records import NotRegular
from ..runs import evaluations, tree
from ..runs.records import Run
from ..runs.untrusted import MAX_FILES, excerpt
from . import pulled
from .pulled import Entry, good_name

KINDS = {
    "exports": "exported policies (exports/, from `hpctrain export`)",
    "eval": "evaluation records (eval/, from `hpctrain eval`)",
    "videos": "videos (videos/, and Isaac Lab's videos/ folders in its log folders)",
    "checkpoint": "the checkpoint --checkpoint names (the newest by default)",
    "tensorboard": "TensorBoard event files (events.out.tfevents.*)",
    "logs": "the run's records and logs (its top-level files, logs/, status/, usage/; a sweep's "
            "tasks')",
}
FOLDERS = {"exports": "exports/", "eval": "eval/", "videos": "videos/"}
CHECKPOINTS = ("newest", "all", "none")
DEFAULT_MAX = 20 << 30
IO_TIMEOUT = 300  # seconds without a byte before rsync gives up (a dead link, not a slow one)
MAX_BOOTSTRAP = 1 << 20
MAX_LISTING = 48 << 20  # bytes of listing: MAX_FILES names of ~250 bytes, with room to spare
# $1 the run directory, $2 how many lines at most, then the folders to list (./ relative).
# Left out: the code snapshot and hpctrain's own rank-side copy, the run's and its trials' (the
# code is yours already), and rsync's partial folders.
_LIST = ('cd -- "$1" 2>/dev/null || { echo "hpctrain: $1: no such run directory" >&2; exit 3; }; '
         'n=$2; shift 2; find -P "$@" -mindepth 1 \\( -path ./code -o -path ./rank '
         '-o -path "./trials/*/code" -o -path "./trials/*/rank" '
         f'-o -name {pulled.PARTIAL} \\) -prune -o -type f -printf "%s %T@ %p\\0" 2>/dev/null '
         '| head -z -n "$n"')
# $1 the run directory; NUL-separated relative names on stdin.
_SUMS = 'cd -- "$1" 2>/dev/null || exit 3; xargs -0 -r sha256sum --'
# The run's records and logs: its top-level files, hpctrain's logs/, status/ and usage/ (what
# `report` reads), and the configuration Isaac Lab keeps beside its checkpoints
# (logs/<library>/<task>/<time>/params/), not the rest of that folder (every checkpoint: the
# checkpoint kind chooses); a sweep's tasks' too.
_RECORDS = re.compile(r"(?:tasks/[0-9]+/)?"
                      r"(?:logs/[^/]+|logs/(?:[^/]+/){3}params/[^/]+|status/.*|usage/.*|[^/]+)")
_LINE = re.compile(rb"([0-9]{1,16}) ([0-9]{1,12})(?:\.[0-9]*)? \./(.*)", re.S)
_PATTERN = re.compile(r"[A-Za-z0-9_.*?/\[\]-]{1,512}")


class Listed(NamedTuple):
    path: str
    size: int
    mtime: int


# ----------------------------------------------------------------------------- where it lives

class Here:
    """A run directory on this machine (the local site, or a shared file system)."""

    def __init__(self, root: Path):
        self.root = str(root)
        self.shown = str(root)

    def shell(self, script: str, args: list[str], input: bytes = b"", limit: int = tools.MAX_OUTPUT,
              timeout: float = 600) -> tuple[int, bytes, str]:
        try:
            proc = tools.run(["bash", "-c", script, "hpctrain", *args], timeout, limit=limit,
                             input=input)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise HpctrainError(f"cannot list {self.root}: {exc}",
                                fix="check that the run directory is readable") from None
        return proc.returncode, proc.stdout, proc.stderr.decode(errors="replace")

    def rsync_source(self) -> tuple[list[str], str]:
        # A copy on one machine: rsync would send whole files; the delta algorithm is what lets
        # a cut copy resume from the part that arrived.
        return ["--no-whole-file"], self.root.rstrip("/") + "/"


class Far:
    """A run directory on a cluster, reached through its login node (run.json's `remote`)."""

    def __init__(self, far: dict):
        from ..backends.slurm.login import Login
        self.login = Login(far)
        self.root = far["path"]
        self.shown = f"{self.login.host}:{self.root}"

    def shell(self, script: str, args: list[str], input: bytes = b"", limit: int = tools.MAX_OUTPUT,
              timeout: float = 600) -> tuple[int, bytes, str]:
        from ..backends.ssh import openssh
        ssh = self.login.ssh
        command = ssh.command(self.login.host, ["bash", "-c", script, "hpctrain", *args])
        try:
            proc = tools.run(command, timeout, limit=limit, input=input)
        except FileNotFoundError:
            raise HpctrainError("'ssh' is not installed here",
                                fix="install OpenSSH's client (Debian: openssh-client)") from None
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise HpctrainError(f"listing {self.shown} failed: {exc}",
                                fix="try again; check the login node answers ssh") from None
        said = proc.stderr.decode(errors="replace")
        if proc.returncode == 255:
            what, fix = openssh.explain(self.login.host, said, self.login.connect_timeout)
            raise HpctrainError(f"cannot reach the login node: {what}", fix=fix)
        return proc.returncode, proc.stdout, said

    def rsync_source(self) -> tuple[list[str], str]:
        from ..backends.ssh import openssh
        ssh = self.login.ssh
        return (["-e", openssh.rsync_shell([*ssh.words, *ssh.sharing])],
                f"{self.login.host}:{self.root.rstrip('/')}/")


def source_of(run: Run) -> Here | Far:
    far = run.record.extra.get("remote")
    if far is None:
        return Here(run.path)
    from ..backends.slurm.login import checked_far
    return Far(checked_far(far, f"{run.path / 'run.json'}: 'remote"))


# ----------------------------------------------------------------------------- listing

def listing(src: Here | Far, scopes: list[str]) -> tuple[list[Listed], list[str]]:
    """The regular files below the scopes (relative folders; "" the whole run), and the names
    skipped as not plain (shown as short excerpts)."""
    starts = ["./" + s if s else "." for s in scopes]
    status, out, said = src.shell(_LIST, [src.root, str(MAX_FILES + 1), *starts],
                                  limit=MAX_LISTING)
    if status == 3:
        raise HpctrainError(f"{src.shown} is not there (the run directory was removed?)",
                            fix="check the run id (hpctrain list); nothing was copied")
    if status not in (0, 1):
        raise HpctrainError(f"listing {src.shown} failed (exit {status}): {said.strip()[-300:]}",
                            fix="check the run directory there is readable")
    records = out.split(b"\0")
    if records and records[-1] == b"":
        records.pop()
    if len(records) > MAX_FILES:
        raise HpctrainError(f"{src.shown} holds more than {MAX_FILES} files",
                            fix="pull fewer kinds (--only), or a sweep's or study's part")
    files, skipped = [], []
    for rec in records:
        m = _LINE.fullmatch(rec)
        name = m and m.group(3).decode("utf-8", errors="replace")
        if not m or not good_name(name):
            if m and any(p.startswith(".") and p not in (".", "..") for p in name.split("/")):
                continue  # hidden: files being written (hpctrain's *.tmp, rsync's), not artifacts
            skipped.append(excerpt((m.group(3) if m else rec).decode("utf-8", errors="replace")))
            continue
        files.append(Listed(name, int(m.group(1)), int(m.group(2))))
    return files, skipped


def checkpoint_patterns(run: Run, scope: str) -> list[str]:
    """The run's checkpoint patterns, each relative and plain; [] when it has none. Read from
    bootstrap.json here (a cluster's run has its copy in the mirror since submit; a trial
    there, its study's), bounded and without following a link: no round trip to the cluster."""
    for rel in ([f"{scope}/bootstrap.json"] if scope else []) + ["bootstrap.json"]:
        try:
            fd = tree.open_file(run.path / rel, run.path)
        except (OSError, ValueError):
            continue
        with os.fdopen(fd, "rb") as f:
            data = f.read(MAX_BOOTSTRAP + 1)
        try:
            doc = json.loads(data.decode("utf-8")) if len(data) <= MAX_BOOTSTRAP else None
        except (ValueError, RecursionError):
            doc = None
        found = doc.get("checkpoint_patterns") if isinstance(doc, dict) else None
        if isinstance(found, list):
            return [p for p in found[:64] if isinstance(p, str) and _PATTERN.fullmatch(p)
                    and not p.startswith("/") and ".." not in p.split("/")]
    return []


def _glob(pattern: str) -> re.Pattern:
    """A glob as the rank side reads it (glob.glob relative to the run): `*` stays in one folder."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:[^/]+/)*")
            i += 3
            continue
        out.append({"*": "[^/]*", "?": "[^/]"}.get(c) or (c if c in "[]" else re.escape(c)))
        i += 1
    try:
        return re.compile("".join(out))
    except re.error:
        return re.compile(r"(?!)")


def _natural(name: str) -> list:
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", name)]


# ----------------------------------------------------------------------------- choosing

def choose(files: list[Listed], scope: str, kinds: list[str], checkpoint: str,
           patterns: list[str]) -> list[Listed]:
    """The listed files of the chosen kinds (each path relative to the run; the rules read it
    relative to `scope`, a study's trial)."""
    prefix = scope + "/" if scope else ""
    rules = [_glob(p) for p in patterns]
    chosen: dict[str, Listed] = {}
    checkpoints: list[tuple[Listed, str]] = []
    for f in files:
        if not f.path.startswith(prefix):
            continue
        rel = f.path[len(prefix):]
        name = rel.rsplit("/", 1)[-1]
        if any(rel.startswith(FOLDERS[k]) for k in kinds if k in FOLDERS):
            chosen[f.path] = f
        elif "videos" in kinds and "/videos/" in "/" + rel:
            chosen[f.path] = f  # Isaac Lab's: logs/<library>/<task>/<time>/videos/train/
        elif "tensorboard" in kinds and name.startswith("events.out.tfevents."):
            chosen[f.path] = f
        elif "logs" in kinds and _RECORDS.fullmatch(rel):
            chosen[f.path] = f
        if any(r.fullmatch(rel) for r in rules) and not being_written(name) and f.size > 0:
            checkpoints.append((f, name))
    if "checkpoint" in kinds and checkpoint != "none":
        if checkpoint == "all":
            picked = [f for f, _ in checkpoints]
        elif checkpoint == "newest":
            picked = [max(checkpoints, key=lambda c: (c[0].mtime, _natural(c[1])))[0]] \
                if checkpoints else []
        else:
            picked = [f for f, name in checkpoints if name == checkpoint or f.path == checkpoint]
            if not picked:
                shown = ", ".join(n for _, n in sorted(checkpoints, key=lambda c: _natural(c[1]))[-5:])
                raise HpctrainError(f"the run has no checkpoint named {excerpt(checkpoint)}"
                                    + (f" (the newest: {shown})" if shown else " (it has none)"),
                                    fix="--checkpoint newest, all, none or one of its names")
        for f in picked:
            chosen[f.path] = f
    return sorted(chosen.values())


def parse_size(text: str, flag: str = "--max-size") -> int:
    """'500M', '20G', '1.5T', '4096' (bytes) -> bytes; HpctrainError otherwise."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)(?:i?B)?\s*", text or "", re.I)
    if not m:
        raise HpctrainError(f"{flag} {excerpt(text or '')} is not a size",
                            fix=f"e.g. {flag} 500M, 20G or 1.5T (bytes by 1024s)")
    return int(float(m.group(1)) * (1 << (10 * " KMGT".index(m.group(2).upper() or " "))))


def shown_size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} bytes"


# ----------------------------------------------------------------------------- the folder here

def check_here(src, dest: Path, chosen: list[Listed], overwrite: bool) -> dict[str, tuple]:
    """Refuse a link here, or a file that differs from the run's and that this folder's
    manifest does not show as pulled unchanged (unless overwrite). Returns the hashes taken,
    by path: (sha256, size, mtime_ns, inode), for the manifest to reuse."""
    had = pulled.read_manifest(dest)
    hashed: dict[str, tuple] = {}
    unknown: list[tuple[str, str]] = []
    for f in chosen:
        st = pulled.check_target(dest, f.path)
        if st is None:
            continue
        digest, st = pulled.sha256_of(dest, f.path)
        hashed[f.path] = (digest, st.st_size, st.st_mtime_ns, st.st_ino)
        ours = had.get(f.path)
        if ours is not None and ours.sha256 == digest and ours.size == st.st_size:
            continue  # as the last pull left it: the run's newer file may replace it
        unknown.append((f.path, digest))
    if not unknown or overwrite:
        return hashed
    theirs = far_sums(src, [p for p, _ in unknown])
    differ = [p for p, d in unknown if theirs.get(p) != d]
    if differ:
        shown = ", ".join(differ[:5]) + (f" and {len(differ) - 5} more" if len(differ) > 5 else "")
        raise HpctrainError(f"{len(differ)} file(s) in {dest} differ from the run's and were not "
                            f"pulled there (or changed since): {shown}",
                            fix="move them away, pull into another folder (--to), or replace "
                            "them with --overwrite")
    return hashed


def far_sums(src, names: list[str]) -> dict[str, str]:
    data = b"".join(n.encode() + b"\0" for n in names)
    status, out, said = src.shell(_SUMS, [src.root], input=data, timeout=3600)
    sums = {}
    for line in out.decode(errors="replace").splitlines():
        digest, _, name = line.partition("  ")
        if pulled.SHA256.fullmatch(digest) and name in names:
            sums[name] = digest
    return sums


# ----------------------------------------------------------------------------- copying

class Copied(NamedTuple):
    files: int
    sent: int  # bytes that crossed (rsync's literal data)
    reused: int  # bytes rsync found here already (a resumed file's part, unchanged files)
    missing: list[str]  # chosen, but gone from the run before rsync reached them


def _hash_in_place(dest: Path, rel: str, wait: float = 5.0):
    """sha256_of once rsync has put the file in place: it prints a name just before it renames
    the finished file there. Hashing it now, while rsync copies the next file, is what keeps
    the manifest nearly free."""
    import time
    deadline = time.monotonic() + wait
    while True:
        try:
            return pulled.sha256_of(dest, rel)
        except FileNotFoundError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.005)


def _feed(pipe, names: list[str]) -> None:
    try:
        for n in names:
            pipe.write(n.encode() + b"\0")
        pipe.close()
    except (BrokenPipeError, ValueError):  # rsync ended early: its status says why
        pass


def _drain(pipe, into: bytearray, keep: int = 1 << 20) -> None:
    while chunk := pipe.read(1 << 16):
        if len(into) < keep:
            into.extend(chunk)


def _arrived_odd(exc: OSError, dest: Path) -> HpctrainError:
    return HpctrainError(f"{exc.strerror}: it arrived as a link or a special file",
                         fix=f"remove it from {dest}; it is not in the manifest")


def copy(src, dest: Path, chosen: list[Listed], hashed: dict[str, tuple],
         bwlimit: int | None = None) -> tuple[Copied, dict[str, Entry]]:
    """rsync the chosen files into dest, hashing each as rsync finishes it."""
    extra, source = src.rsync_source()
    # --no-links, --no-D: a name that became a link or a device since the listing is skipped,
    # never copied; --no-implied-dirs: the folders on the way are made here as plain folders,
    # whatever they are there; --partial-dir: what a cut copy leaves, for the next to resume.
    command = ["rsync", "-a", "-s", "--no-links", "--no-D", "--no-implied-dirs",
               f"--partial-dir={pulled.PARTIAL}", "--from0", "--files-from=-",
               "--out-format=%n", "--stats", f"--timeout={IO_TIMEOUT}"]
    if bwlimit:
        command.append(f"--bwlimit={max(1, bwlimit >> 10)}")  # rsync's unit: KiB/s
    command += [*extra, source, str(dest).rstrip("/") + "/"]
    names = {f.path for f in chosen}
    entries: dict[str, Entry] = {}
    pool = ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1))
    futures = {}
    try:
        # In this process group: Ctrl-C reaches rsync too, which then keeps what arrived.
        proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
    except FileNotFoundError:
        raise HpctrainError("'rsync' is not installed here; pull copies with it",
                            fix="install rsync (Debian: rsync), here and where the run is") from None
    err = bytearray()
    # The list goes in and the names come out at once: either pipe could fill while the other
    # waits.
    feeding = threading.Thread(target=_feed, args=(proc.stdin, sorted(names)), daemon=True)
    draining = threading.Thread(target=_drain, args=(proc.stderr, err), daemon=True)
    feeding.start()
    draining.start()
    stats: dict[str, int] = {}
    try:
        for raw in proc.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            if line in names and line not in futures:
                futures[line] = pool.submit(_hash_in_place, dest, line)
            m = re.fullmatch(r"(Literal|Matched) data: ([0-9,]+) bytes", line.strip())
            if m:
                stats[m.group(1)] = int(m.group(2).replace(",", ""))
        status = proc.wait()
        draining.join(5)
    except BaseException:
        # TERM, not KILL: rsync moves the file it was writing into its partial folder, and the
        # next pull resumes from there.
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        pool.shutdown(cancel_futures=True)
        raise
    said = " ".join(bytes(err).decode(errors="replace").split())
    if status not in (0, 24):
        pool.shutdown(cancel_futures=True)
        cut = status in (12, 20, 30, 35, 255) or "connection unexpectedly closed" in said
        what = ("the copy was cut" if cut else f"rsync failed (exit {status})")
        raise HpctrainError(f"{what} from {src.shown}: {said[-400:]}",
                            fix="run the same pull again: it resumes, sending only what has "
                            "not arrived" if cut else "see rsync's message; the same pull "
                            "again resumes what arrived")
    # A name rsync printed may not be in place yet (it prints, then renames), or an older file
    # may still stand there: what was hashed counts only if the file is still that one.
    early: dict[str, tuple] = {}
    try:
        for path, fut in futures.items():
            try:
                digest, st = fut.result()
            except FileNotFoundError:
                continue
            early[path] = (digest, st.st_size, st.st_mtime_ns, st.st_ino)
    except NotRegular as exc:
        raise _arrived_odd(exc, dest) from None
    finally:
        pool.shutdown()
    missing, later = [], []
    for f in chosen:
        st = pulled.local_state(dest, f.path)
        if st is None:
            missing.append(f.path)
            continue
        now = (st.st_size, st.st_mtime_ns, st.st_ino)
        known = early.get(f.path) or hashed.get(f.path)
        if known and known[1:] == now:
            entries[f.path] = Entry(f.path, known[1], known[0])
        else:
            later.append(f.path)
    try:
        with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as again:
            for path, (digest, st) in zip(later, again.map(lambda p: pulled.sha256_of(dest, p), later)):
                entries[path] = Entry(path, st.st_size, digest)
    except NotRegular as exc:
        raise _arrived_odd(exc, dest) from None
    return Copied(len(entries), stats.get("Literal", 0), stats.get("Matched", 0), missing), entries


# ----------------------------------------------------------------------------- the command

class Pulled(NamedTuple):
    dest: Path
    chosen: int
    total: int
    copied: Copied
    skipped: list[str]


def pull(run: Run, dest: Path, kinds: list[str], checkpoint: str = "newest",
         max_size: int = DEFAULT_MAX, overwrite: bool = False, scope: str = "",
         also: tuple[str, ...] = (), bwlimit: int | None = None) -> Pulled:
    """Copy the chosen artifacts of `run` into `dest` (scope: a trial's folder inside a study;
    also: files inside the run to copy as well, e.g. a population member's checkpoint)."""
    for part in (scope, *also):
        if part and not good_name(part):
            raise HpctrainError(f"{excerpt(part)} is not a path inside the run that pull copies",
                                fix="check the study's records (its best member's checkpoint)")
    src = source_of(run)
    if "checkpoint" in kinds and checkpoint == "best":
        checkpoint = best_checkpoint(run, src, scope)
    starts = [scope] + [str(PurePosixPath(a).parent) for a in also]
    files, skipped = listing(src, sorted(set(s if s != "." else "" for s in starts)))
    patterns = checkpoint_patterns(run, scope) if "checkpoint" in kinds else []
    chosen = choose(files, scope, kinds, checkpoint, patterns)
    by_path = {f.path: f for f in files}
    for a in also:
        if a in by_path:
            chosen.append(by_path[a])
    chosen = sorted(set(chosen))
    total = sum(f.size for f in chosen)
    if total > max_size:
        largest = ", ".join(f"{f.path} ({shown_size(f.size)})"
                            for f in sorted(chosen, key=lambda f: -f.size)[:3])
        raise HpctrainError(f"the selection is {shown_size(total)} in {len(chosen)} files, over "
                            f"--max-size {shown_size(max_size)}; largest: {largest}",
                            fix=f"raise --max-size (e.g. --max-size {-(-total >> 30)}G), or "
                            "choose fewer kinds (--only, --checkpoint newest or none)")
    if dest.exists() and not dest.is_dir():
        raise HpctrainError(f"{dest} is not a folder", fix="give a folder with --to")
    dest.mkdir(parents=True, exist_ok=True)
    hashed = check_here(src, dest, chosen, overwrite)
    copied, entries = copy(src, dest, chosen, hashed, bwlimit)
    # What earlier pulls wrote and is still here, with what this one wrote.
    old = {p: e for p, e in pulled.read_manifest(dest).items()
           if p in entries or pulled.local_state(dest, p) is not None}
    old.update(entries)
    rec = run.record
    pulled.write_manifest(dest, {"run_id": rec.run_id, "name": rec.name, "from": src.shown,
                                 **({"scope": scope} if scope else {})}, old)
    return Pulled(dest, len(chosen), total, copied, skipped)


def best_checkpoint(run: Run, src: Here | Far, scope: str = "") -> str:
    """--checkpoint best: the checkpoint of the best evaluation (`hpctrain eval`'s records, read
    from what the cluster holds now), as a path inside the run. Never a training reward."""
    if isinstance(src, Far):  # the records into the mirror here first, as a study's are
        parts = [*(scope.split("/") if scope else []), "eval"]
        src.login.pull(src.root, str(run.path), [
            *(f"--include=/{'/'.join(parts[:i])}/" for i in range(1, len(parts) + 1)),
            f"--include=/{'/'.join(parts)}/*.json", "--exclude=*"])
    done, _problems = evaluations.read(run.path / scope if scope else run.path)
    top = evaluations.best(done)
    if top is None:
        raise HpctrainError(f"run {run.id} has no evaluation: 'best' is the best checkpoint by "
                            "evaluation (a training reward is not one)",
                            fix=f"hpctrain eval {run.id} --checkpoint all --wait first (or "
                            "--checkpoint newest)")
    path = f"{scope}/{top.checkpoint}" if scope else top.checkpoint
    if not good_name(path):
        raise HpctrainError(f"the best evaluation names {excerpt(top.checkpoint)}, not a "
                            "checkpoint inside the run", fix=f"evaluate again: hpctrain eval "
                            f"{run.id} --checkpoint all")
    return path


# A study's own records (its journal, a population's lineage): what its best is read from.
_STUDY_RECORDS = ["--include=/study/***", "--include=/population/",
                  "--include=/population/member-*.jsonl", "--exclude=*"]


def fetch_study_records(run: Run) -> None:
    """A study on a cluster: its records brought into the mirror here first, so that its best
    trial or member is read from what the cluster holds now."""
    src = source_of(run)
    if isinstance(src, Far):
        src.login.pull(src.root, str(run.path), _STUDY_RECORDS)


def format_pulled(p: Pulled) -> str:
    c = p.copied
    lines = [f"pulled {c.files} file(s), {shown_size(p.total)}, into {p.dest} "
             f"({shown_size(c.sent)} sent, {shown_size(c.reused)} already here)",
             f"manifest: {p.dest / pulled.MANIFEST}"]
    if c.missing:
        lines.append(f"gone from the run before they were copied: {', '.join(c.missing[:5])}")
    if p.skipped:
        lines.append(f"skipped {len(p.skipped)} file(s) whose names pull does not copy "
                     f"(spaces, hidden or odd names): {', '.join(p.skipped[:3])}")
    return "\n".join(lines)

