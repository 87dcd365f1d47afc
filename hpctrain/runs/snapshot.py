"""The code snapshot: a job runs the code as it was at submit, not whatever the tree holds later.

A requeued job, a job that waited in the queue for a day, and a `submit --resume` all start
the program again; without a copy they would run the user's latest edits, half-finished ones
included. So by default `submit` copies the code into the run directory, RUN_DIR/code/, and the
job runs from there (TorchX's workspace, submitit's RsyncSnapshot and NeMo-Run's packager do the
same):

- in a git checkout (the nearest directory above the working directory with .git): the
  checkout's tracked files as they are in the working tree — uncommitted changes included —
  plus untracked files that git does not ignore (a new script not yet added); the job runs in
  the same place inside the copy (code/<path of the working directory in the checkout>);
- elsewhere: the working directory minus the patterns of its .gitignore and DEFAULT_IGNORES.

Either way the patterns of a .hpctrainignore file at the top and `snapshot.exclude` are left
out, and so are the runs directory and hpctrain's own state when they lie inside. The size is
reported at submit and capped (`snapshot.max_mb`, checked before anything is written);
`snapshot: false` runs the live tree. run.json records what was copied (RunRecord.snapshot)
and RUN_DIR/code-files.txt lists every file.

Only the program's side moves: `setup` lines and modules still run where the job was submitted
(a venv's activate script, say, is not code), and relative paths to the interpreter are made
absolute from there. Absolute paths in the job (an Isaac Lab checkout) are used as they are.
"""
from __future__ import annotations

import os
from pathlib import Path

import msgspec

from ..errors import HpctrainError
from ..schema.spec import Snapshot

CODE_DIR = "code"
FILE_LIST = "code-files.txt"
IGNORE_FILE = ".hpctrainignore"
# Without git: what no job needs to run and what is often large.
# Applied to git's untracked files too: a virtualenv symlinked into a checkout (`.venv-x ->
# /elsewhere`) is not ignored by a `.venv*/` line, and a copy that follows it is gigabytes.
DEFAULT_IGNORES = (".git/", "__pycache__/", "*.py[cod]", ".venv*", "venv",
                   "*.egg-info/", ".pytest_cache/", ".mypy_cache/", ".ipynb_checkpoints/",
                   "node_modules/", "wandb/", "runs/", "outputs/", "multirun/")


class Source(msgspec.Struct, kw_only=True):
    """What a snapshot copies: files relative to `root`, found by `method`."""
    root: str
    rel: str  # the working directory, relative to root ("" when it is the root)
    method: str  # git | directory
    files: list[str]
    bytes: int
    commit: str | None = None
    dirty: bool | None = None

    def describe(self) -> str:
        origin = (f"git {self.commit[:12]}" + (", uncommitted changes included" if self.dirty else "")
                  if self.method == "git" and self.commit else self.method)
        return f"{len(self.files)} files, {human(self.bytes)} from {self.root} ({origin})"

    def record(self, run_dir: Path) -> dict:
        """What run.json keeps of it."""
        return {"dir": str(run_dir / CODE_DIR), "workdir": self.rel, "source": self.root,
                "method": self.method, "files": len(self.files), "bytes": self.bytes,
                "commit": self.commit, "dirty": self.dirty, "list": FILE_LIST}


def human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def git_root(workdir: str) -> str | None:
    """The checkout the working directory is in: the nearest directory above with .git (a
    directory, or a file for worktrees and submodules). Cheap: render asks it too."""
    d = os.path.abspath(workdir)
    while True:
        if os.path.exists(os.path.join(d, ".git")):
            return d
        parent = os.path.dirname(d)
        if parent == d:
            return None
        d = parent


def root_of(workdir: str) -> tuple[str, str]:
    """(the directory copied, the working directory relative to it)."""
    root = git_root(workdir) or os.path.abspath(workdir)
    rel = os.path.relpath(os.path.abspath(workdir), root)
    return root, "" if rel == "." else rel


def run_workdir(code_dir: str, workdir: str) -> str:
    """Where the program runs inside the snapshot at code_dir."""
    _, rel = root_of(workdir)
    return os.path.join(code_dir, rel) if rel else code_dir


def _spec(lines):
    import pathspec
    return pathspec.GitIgnoreSpec.from_lines([ln for ln in lines if ln.strip()])


def _read_lines(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return [ln.rstrip("\n") for ln in f if not ln.startswith("#")]
    except OSError:
        return []


def _inside(path: str, root: str) -> str | None:
    """path relative to root when it lies inside it, else None."""
    try:
        rel = os.path.relpath(os.path.realpath(path), os.path.realpath(root))
    except ValueError:
        return None
    return None if rel == os.pardir or rel.startswith(os.pardir + os.sep) else rel


def _git_files(root: str) -> list[str] | None:
    """The checkout's tracked files, and its untracked ones that neither git nor
    DEFAULT_IGNORES ignore."""
    import subprocess

    def ls(*args: str) -> list[str] | None:
        try:
            proc = subprocess.run(["git", "-C", root, "ls-files", "-z", *args],
                                  capture_output=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            return None
        if proc.returncode != 0:
            return None
        return [n for n in proc.stdout.decode(errors="surrogateescape").split("\0") if n]
    tracked, others = ls("--cached"), ls("--others", "--exclude-standard")
    if tracked is None or others is None:
        return None
    base = _spec(DEFAULT_IGNORES)
    return sorted(set(tracked) | {n for n in others if not base.match_file(n)})


def _walk(root: str, ignore) -> list[str]:
    out = []
    for d, dirs, files in os.walk(root):
        rel_d = os.path.relpath(d, root)
        rel_d = "" if rel_d == "." else rel_d
        # A symbolic link to a directory is listed as an entry of its own (copy() brings its
        # content, or the link when it points inside the tree), not walked and not dropped.
        links = [x for x in dirs if os.path.islink(os.path.join(d, x))]
        dirs[:] = sorted(x for x in dirs if x not in links
                         and not ignore.match_file(os.path.join(rel_d, x) + "/"))
        out += [os.path.join(rel_d, f) for f in sorted(files + links)
                if not ignore.match_file(os.path.join(rel_d, f))
                and not (f in links and ignore.match_file(os.path.join(rel_d, f) + "/"))]
    return out


def collect(workdir: str, settings: Snapshot, skip: list[str]) -> Source:
    """List what a snapshot of `workdir` copies; `skip`: directories never copied (the runs
    directory, hpctrain's state) when they lie inside."""
    root, rel = root_of(workdir)
    extra = _spec(_read_lines(os.path.join(root, IGNORE_FILE)) + list(settings.exclude))
    skipped = [r for r in (_inside(p, root) for p in skip) if r and r != "."]
    method, commit, dirty = "directory", None, None
    names = _git_files(root) if git_root(workdir) else None
    if names is not None:
        method = "git"
        from .records import git_state
        state = git_state(root)
        commit, dirty = state.get("commit"), state.get("dirty")
    else:
        base = _spec(list(DEFAULT_IGNORES) + _read_lines(os.path.join(root, ".gitignore")))
        names = _walk(root, base)
    files, total = [], 0
    for name in names:
        if extra.match_file(name) or any(name == s or name.startswith(s + os.sep) for s in skipped):
            continue
        path = os.path.join(root, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue  # deleted in the tree, not yet in the index
        if os.path.isdir(path) and not os.path.islink(path):
            # A submodule (git lists it as one entry): its files, without its .git.
            for sub in _walk(path, _spec([".git/", ".git"])):
                try:
                    total += os.lstat(os.path.join(path, sub)).st_size
                except OSError:
                    continue
                files.append(os.path.join(name, sub))
            continue
        import stat as _stat
        if not (_stat.S_ISREG(st.st_mode) or _stat.S_ISLNK(st.st_mode)):
            kind = "a named pipe" if _stat.S_ISFIFO(st.st_mode) else "a socket" if \
                _stat.S_ISSOCK(st.st_mode) else "a device"
            raise HpctrainError(f"the code snapshot cannot copy {path}: it is {kind}, not a "
                                "file", fix=f"leave it out: snapshot.exclude: [{name}] (or a "
                                f"{IGNORE_FILE} line), or move it out of {root}")
        if _stat.S_ISLNK(st.st_mode):
            _check_link(path, name, root)
        if _stat.S_ISLNK(st.st_mode) and os.path.isdir(path) and _link_kept(path, root) is None:
            total += _tree_size(path)  # a directory's content is copied: counted here
        total += st.st_size
        files.append(name)
    return Source(root=root, rel=rel, method=method, files=files, bytes=total, commit=commit,
                  dirty=dirty)


def _check_link(path: str, name: str, root: str) -> None:
    """A symbolic link that loops (a -> b -> a, or through itself) never reaches a file: the
    copy would stop on it with the system's bare ELOOP. A link to nothing is left out (copy())."""
    import errno
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise HpctrainError(f"the code snapshot cannot copy {path}: it is a symbolic link "
                                f"that loops ({name} -> {os.readlink(path)} -> ... never reaches "
                                "a file)", fix=f"remove or repair the link, or leave it out: "
                                f"snapshot.exclude: [{name}] (or a {IGNORE_FILE} line)") from None


def holds(source: Source, rel: str) -> bool:
    """Whether the copy brings the file at `rel` (relative to source.root): listed, in a listed
    directory, or under a listed symbolic link to a directory, whose content copy() brings
    (or which stays a link into the tree: either way the path opens in the copy)."""
    held = set(source.files)
    if rel in held or any(f.startswith(rel + os.sep) for f in held):
        return True
    parts = rel.split(os.sep)
    for i in range(1, len(parts)):
        above = os.sep.join(parts[:i])
        path = os.path.join(source.root, above)
        if above in held and os.path.islink(path) and os.path.isdir(path):
            return True
    return False


def left_out(source: Source, rel: str, settings: Snapshot) -> tuple[str, str]:
    """(why, fix) for a file under source.root that the copy does not bring (not holds()): the
    rule that left it out, as collect() applied them, so that the message blames the right one."""
    root = source.root

    def pattern(lines) -> str | None:
        return next((p for p in lines if p.strip() and not p.startswith("!")
                     and _spec([p]).match_file(rel)), None)
    off = "or set snapshot: false (the job then runs the live tree)"
    found = pattern(settings.exclude)
    if found:
        return (f"snapshot.exclude leaves it out ({found!r})",
                f"take {found!r} out of snapshot.exclude, or narrow it, {off}")
    found = pattern(_read_lines(os.path.join(root, IGNORE_FILE)))
    if found:
        return (f"{IGNORE_FILE} leaves it out (line {found!r})",
                f"take that line out of {os.path.join(root, IGNORE_FILE)}, {off}")
    if source.method == "git":
        import subprocess
        try:
            ignored = subprocess.run(["git", "-C", root, "check-ignore", "-q", "--no-index", rel],
                                     capture_output=True, timeout=60).returncode == 0
        except (OSError, subprocess.SubprocessError):
            ignored = False
        track = f"track it (git add -f {rel}), "
        if ignored:
            return ("git ignores it (.gitignore) and it is not tracked: the snapshot copies "
                    "tracked files and untracked ones git does not ignore",
                    f"{track}take it out of the ignore patterns, move it out of the ignored "
                    f"folder, {off}")
        found = pattern(DEFAULT_IGNORES)
        if found:
            return (f"it is not tracked by git and matches {found!r}, which the snapshot leaves "
                    "out of untracked files (virtualenvs, outputs, caches)",
                    f"{track}move it out of that folder, {off}")
    else:
        found = pattern(list(DEFAULT_IGNORES) + _read_lines(os.path.join(root, ".gitignore")))
        if found:
            origin = ("the snapshot's default ignores (virtualenvs, outputs, caches)"
                      if found in DEFAULT_IGNORES else f"{os.path.join(root, '.gitignore')}")
            return (f"{origin} leave{'s' if found not in DEFAULT_IGNORES else ''} it out "
                    f"({found!r})", f"move it out of that folder, {off}")
    return ("it lies where the snapshot copies nothing (the runs directory or hpctrain's "
            "state)", f"move it into the project, {off}")


def check_size(source: Source, settings: Snapshot, where: str | None) -> None:
    limit = settings.max_mb * 1024 * 1024
    if source.bytes <= limit:
        return
    sizes: dict[str, int] = {}
    for name in source.files:
        top = name.split(os.sep, 1)[0] + ("/" if os.sep in name else "")
        try:
            sizes[top] = sizes.get(top, 0) + os.lstat(os.path.join(source.root, name)).st_size
        except OSError:
            continue
    biggest = ", ".join(f"{k} {human(v)}" for k, v in sorted(sizes.items(), key=lambda kv: -kv[1])[:4])
    raise HpctrainError(
        f"the code snapshot would copy {source.describe()}: more than snapshot.max_mb="
        f"{settings.max_mb} (largest: {biggest})", where,
        f"leave out what the job does not need (snapshot.exclude, or a {IGNORE_FILE} file in "
        f"{source.root}, gitignore syntax), raise snapshot.max_mb, or run the live tree with "
        "snapshot: false")


def _link_kept(path: str, root: str) -> str | None:
    """The relative target to write for a symbolic link in the copy, when the link may stay a
    link: it is relative and its target lies inside the tree. None: copy what it points to."""
    target = os.readlink(path)
    if os.path.isabs(target):
        return None
    real, top = os.path.realpath(path), os.path.realpath(root)
    if real != top and not real.startswith(top + os.sep):
        return None
    # Relative through the link's own directory as listed (not through resolved parents).
    lexical = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(path)), target))
    if not (lexical == os.path.abspath(root) or lexical.startswith(os.path.abspath(root) + os.sep)):
        return None
    return target


def _tree_size(path: str) -> int:
    total = 0
    for d, _, files in os.walk(path):
        for f in files:
            try:
                total += os.stat(os.path.join(d, f)).st_size
            except OSError:
                continue
    return total


def copy(source: Source, run_dir: Path) -> None:
    """Copy the listed files into RUN_DIR/code and write RUN_DIR/code-files.txt."""
    import shutil
    dest = run_dir / CODE_DIR
    dest.mkdir(parents=True, exist_ok=True)
    copied = []
    for name in source.files:
        src, dst = os.path.join(source.root, name), dest / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        try:
            kept = _link_kept(src, source.root) if os.path.islink(src) else None
            if kept is not None:
                os.symlink(kept, dst)  # relative and inside the tree: it resolves in the copy
            elif os.path.isdir(src):
                # A link to a directory out of the tree (or by an absolute path): its content,
                # so that the copy is whole and never points back at the live tree.
                shutil.copytree(src, dst, symlinks=False, ignore_dangling_symlinks=True,
                                ignore=shutil.ignore_patterns(".git"))
            else:
                shutil.copy2(src, dst)  # a link out of the tree: what it points to
        except FileNotFoundError:
            continue  # removed since it was listed, or a link that points nowhere
        except (PermissionError, shutil.Error) as exc:
            # copytree gathers its failures: [(source, destination, why), ...]; name the first.
            first = exc.args[0][0] if isinstance(exc, shutil.Error) and exc.args and \
                isinstance(exc.args[0], list) and exc.args[0] else None
            if first and len(first) == 3:
                src, reason = first[0], str(first[2])
            else:
                reason = getattr(exc, "strerror", None) or "not readable"
            raise HpctrainError(f"the code snapshot cannot copy {src}: {reason}",
                                fix=f"make it readable, or leave it out: snapshot.exclude: "
                                f"[{name}] (or a {IGNORE_FILE} line)") from None
        copied.append(name)
    # A link kept whose target the copy left out (snapshot.exclude) would dangle: its content.
    for name in copied:
        dst = dest / name
        if os.path.islink(dst) and not os.path.exists(dst):
            src = os.path.join(source.root, name)
            os.unlink(dst)
            if os.path.isdir(src):
                shutil.copytree(src, dst, symlinks=False, ignore_dangling_symlinks=True)
            else:
                shutil.copy2(src, dst)
    if source.rel:
        (dest / source.rel).mkdir(parents=True, exist_ok=True)  # the job starts there
    (run_dir / FILE_LIST).write_text("".join(f"{n}\n" for n in copied),
                                     errors="surrogateescape")
