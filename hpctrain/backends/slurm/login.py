"""Submitting from a laptop or a notebook server to a cluster reached through its login node.

    name: mycluster
    scheduler: slurm
    login: me@login.cluster.edu          # the scheduler's tools run there, over ssh
    ssh: {identity: ~/.ssh/id_ed25519}   # the same ssh: section as scheduler ssh (backends/ssh/openssh.py)
    remote: {runs_dir: /scratch/me/hpctrain-runs, code_max_mb: 200, exclude: [data/]}

- Every scheduler command (sbatch, squeue, scontrol, sacct, scancel) runs on the login node:
  the backend's own code runs unchanged inside `commands.on(login)`, and commands.run sends
  each command over one shared OpenSSH connection (ControlMaster), every word quoted for the
  remote shell. Nothing needs Slurm here.
- The run directory the job sees lives on the cluster, under remote.runs_dir; the job runs from
  its code/ folder, a copy of the working directory made at submit (git's view of it when it is
  a checkout: .gitignore respected; remote.exclude too; a size cap), so edits made here after
  submitting never reach a queued or requeued job.
- Here, runs/<name>/<run id>/ is the run's mirror: run.json (which names the login node and the
  cluster's directory, so that status/logs/cancel/list find their way), the files as written at
  submit, and what `fetch` brings back (logs, status, results, a function's result pickles).
- Secrets: their values travel on the ssh session's standard input into the environment of the
  remote sbatch (which hands them to the job as sbatch does), never on a command line or in a
  file on either side.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from ...errors import HpctrainError
from ...rank import tools
from ...runs.records import Run
from .. import commands
from ..ssh import openssh
from ..base import Backend, JobState
from ..commands import SchedulerError

if TYPE_CHECKING:
    from ...schema.spec import SiteProfile

LOGIN = re.compile(r"(?:([A-Za-z0-9_][A-Za-z0-9_.-]{0,63})@)?(" + openssh.HOST.pattern + r")")
CODE = "code"  # the working directory's copy, inside the run directory on the cluster
# Reads NAME\0VALUE\0 pairs from standard input into the environment, then runs the command:
# how secrets reach the remote sbatch without a command line or a file.
_WITH_ENV = ('while IFS= read -r -d "" n && IFS= read -r -d "" v; do export "$n=$v"; done; '
             'exec "$@"')
# On the login node before anything is copied: the scheduler's tool is there, the run
# directory can be made, and which Python answers to the job's interpreter.
_PROBE = ('command -v "$1" >/dev/null 2>&1 || { echo "hpctrain: $1: command not found" >&2; '
          'exit 127; }; mkdir -p -- "$2" || exit 3; shift 2; '
          '"$@" -c "import sys; print(\'%d.%d\' % sys.version_info[:2])" 2>/dev/null || echo none')
# `submit --resume` on the cluster: the ended attempt's failure.json appended to failures.jsonl
# as one line (rank/records.archive_job_failure does the same in the mirror).
_ARCHIVE = ('cd -- "$1" 2>/dev/null || exit 0; [ -f failure.json ] || exit 0; '
            '{ tr -d "\n" <failure.json; echo; } >>failures.jsonl && rm -f failure.json')
# What a followed run brings back (logs, records, results); once it ended, the same again, whole.
_FETCHED = ["--include=/logs/***", "--include=/status/***", "--include=/results/***",
            "--include=/submitit/***", "--include=/tasks/", "--include=/tasks/*/",
            "--include=/tasks/*/logs/***", "--include=/tasks/*/status/***",
            "--include=/tasks/*/results/***", "--exclude=*"]


def parse_login(text: str) -> tuple[str | None, str]:
    """(user or None, host) of a site's `login:`; ValueError when it is neither user@host nor host."""
    m = LOGIN.fullmatch(text)
    if m is None:
        raise ValueError(text)
    return m.group(1), m.group(2)


# ----------------------------------------------------------------------------- the site

def check_site(site: SiteProfile, doc) -> None:
    """login:, remote: and ssh: of a Slurm site; raise HpctrainError at doc.where(key path)."""
    if site.login is None:
        for key in ("remote", "ssh"):
            if key in doc:
                raise HpctrainError(f"'{key}' is read only with 'login:' on a Slurm site "
                                    "(submitting through a login node over ssh)", doc.where((key,)),
                                    f"add login: user@host, or remove '{key}'")
        return
    try:
        user, _ = parse_login(site.login)
    except ValueError:
        raise HpctrainError(f"login {site.login!r} is not user@host or host", doc.where(("login",)),
                            "e.g. login: me@login.cluster.edu (letters, digits, '.', '-', '_')"
                            ) from None
    if user and site.ssh.user and user != site.ssh.user:
        raise HpctrainError(f"login names user {user!r} and ssh.user {site.ssh.user!r}",
                            doc.where(("ssh", "user")), "name the user once: in login: or ssh.user")
    openssh.check_section(site.ssh, doc)
    runs_dir = site.remote.runs_dir
    if runs_dir is None:
        raise HpctrainError("a site with login: needs remote.runs_dir, where runs live on the "
                            "cluster", doc.where(("login",)),
                            "add remote: {runs_dir: /scratch/<you>/hpctrain-runs} (an absolute "
                            "path that the login node and the compute nodes both see)")
    if not runs_dir.startswith("/"):
        raise HpctrainError(f"remote.runs_dir {runs_dir!r} is not an absolute path",
                            doc.where(("remote", "runs_dir")),
                            "an absolute path on the cluster, e.g. /scratch/<you>/hpctrain-runs")
    if not re.fullmatch(r"[!-~]+", runs_dir) or any(c in runs_dir for c in "\"'\\%"):
        raise HpctrainError(f"remote.runs_dir {runs_dir!r} holds spaces, quotes, '%' or control "
                            "characters: Slurm's --output directive cannot name a log file there",
                            doc.where(("remote", "runs_dir")), "choose a path without them")
    for i, pattern in enumerate(site.remote.exclude):
        if not pattern or any(ord(c) < 32 or c == "\x7f" for c in pattern):
            raise HpctrainError(f"remote.exclude entry {pattern!r} is not a path pattern",
                                doc.where(("remote", "exclude", i)), "e.g. data/ or *.ckpt")


def run_dir(site: SiteProfile, name: str, run_id: str) -> Path:
    """The run's directory on the cluster (the path its job sees)."""
    return Path(str(PurePosixPath(site.remote.runs_dir) / name / run_id))


def code_dir(run_dir: Path) -> str:
    return str(Path(run_dir) / CODE)


def far_record(site: SiteProfile, far_dir: Path) -> dict:
    """What run.json keeps of the login node: enough for status/logs/cancel from anywhere here."""
    user, host = parse_login(site.login)
    opts = site.ssh
    if user and not opts.user:
        import msgspec
        opts = msgspec.structs.replace(opts, user=user)
    return {"login": host, "ssh": openssh.ssh_words(opts), "connect_timeout": opts.connect_timeout,
            "path": str(far_dir)}


def checked_far(far, where: str) -> dict:
    """run.json's `remote` section read back (what far_record wrote), each value checked: the
    login node a host name, the ssh command line ssh plus checked options (openssh.checked_words),
    the directory an absolute path. HpctrainError naming the file and the key otherwise: a
    record is data, and never a command."""
    try:
        if not isinstance(far, dict):
            raise ValueError(f"{where}' is not a mapping")
        openssh.checked_host(far.get("login"), f"{where}.login'")
        # Exactly what ssh_words writes, from options a site profile may give: never a program
        # run here, a forwarding, another host or a weaker host-key check.
        far = dict(far, ssh=openssh.checked_words(far.get("ssh"), f"{where}.ssh'"))
        openssh.checked_timeout(far.get("connect_timeout"), f"{where}.connect_timeout'")
        path = far.get("path")
        if not (isinstance(path, str) and path.startswith("/") and len(path) <= 4096
                and re.fullmatch(r"[!-~]+", path)):
            raise ValueError(f"{where}.path' is not an absolute path on the cluster")
    except ValueError as exc:
        raise HpctrainError(f"{exc}", fix="restore run.json (hpctrain writes it at submit) or "
                            "remove that run directory; its values are never run") from None
    return far


class ThroughLogin:
    """The transport of a site with `login:` (backends/transport.py): the job's run directory
    is on the cluster and the one here its mirror; commands and the backend go over ssh."""

    # The code copied to the cluster's code/ at submit (RemoteBackend.submit) is the snapshot.
    snapshots_code = False

    def __init__(self, site: SiteProfile):
        self.site, self.login = site, site.login

    def place(self, mirror: Path, name: str, run_id: str) -> tuple[Path, Path | None, str | None]:
        far = run_dir(self.site, name, run_id)
        return far, mirror, code_dir(far)

    def command(self, words: list[str]) -> list[str]:
        return ["ssh", self.login, "--", *words]

    def backend(self, inner: Backend, far_dir: Path) -> Backend:
        return RemoteBackend(inner, far_record(self.site, far_dir))

    def record(self, far_dir: Path) -> dict:
        return {"remote": far_record(self.site, far_dir)}

    def python(self) -> list[str]:
        return ["python3"]  # the cluster's: this machine's path means nothing there


# ----------------------------------------------------------------------------- the login node

class Login:
    """The login node where the scheduler's tools run: one ssh connection, shared by every
    command (openssh.Ssh's ControlMaster)."""

    def __init__(self, far: dict, env: dict[str, str] | None = None):
        self.host = far["login"]
        self.connect_timeout = far.get("connect_timeout")
        self.ssh = openssh.Ssh(far["ssh"], self.connect_timeout)
        self.key = (self.host, tuple(far["ssh"]))
        self.env = env or {}  # given to the command's environment through stdin (secrets)

    def with_env(self, env: dict[str, str]) -> "Login":
        other = object.__new__(Login)
        other.__dict__.update(self.__dict__, env=dict(env))
        return other

    def tool(self, command: list[str], timeout: float = 60, input: str | None = None,
             name: str | None = None) -> str:
        """Run a scheduler tool there; its stdout, or SchedulerError saying what failed (name:
        the tool a "command not found" is about, when the command is a shell around it)."""
        remote, data = list(command), (input or "").encode()
        if self.env:
            if input:
                raise ValueError("a command with input cannot also take an environment")
            remote = ["bash", "-c", _WITH_ENV, "hpctrain", *command]
            data = b"".join(f"{k}\0{v}\0".encode() for k, v in self.env.items())
        result = self.ssh.run(self.host, remote, input=data, timeout=timeout)
        if result.status == 0:
            return result.stdout
        raise self.error(command, result, name or command[0])

    def error(self, command: list[str], result: openssh.Result, name: str) -> SchedulerError:
        said = result.stderr.strip()
        if result.status == 255:
            what, fix = openssh.explain(self.host, said, self.connect_timeout)
            return SchedulerError(command, 255, said, what=f"cannot reach the login node: {what}",
                                  fix=fix)
        if result.status == 127 and "not found" in said:
            return SchedulerError(command, 127, said,
                                  what=f"'{name}' is not found on the login node "
                                  f"{self.host} ({said.splitlines()[-1] if said else ''})",
                                  fix="make the scheduler's tools reach a non-interactive ssh "
                                  f"session on {self.host}: `ssh {self.host} {name} "
                                  "--version` must work (a `module load slurm` or a PATH line "
                                  "at the top of ~/.bashrc, before its interactive-only part)")
        return SchedulerError(command, result.status, said or result.stdout)

    def probe(self, tool: str, far_dir: Path, python: list[str]) -> str | None:
        """Check the login node before anything is copied: the tool is there, the run directory
        can be made; the cluster's Python version ("3.11"), None when it cannot be asked."""
        out = self.tool(["bash", "-c", _PROBE, "hpctrain", tool, str(far_dir), *python],
                        timeout=60 + 2 * (self.connect_timeout or 10), name=tool)
        version = out.strip().splitlines()[-1] if out.strip() else "none"
        return None if version == "none" else version

    def push(self, source: str, target: str, files: list[str] | None = None,
             excludes: list[str] = (), timeout: float = 3600) -> None:
        """rsync a directory here to one there (only `files`, relative, when given)."""
        command = ["rsync", "-a", "-s", "-e", openssh.rsync_shell([*self.ssh.words,
                                                                    *self.ssh.sharing])]
        command += [f"--exclude={e}" for e in excludes]
        if files is not None:
            command += ["--from0", "--files-from=-"]
        command += [source.rstrip("/") + "/", f"{self.host}:{target.rstrip('/')}/"]
        data = b"".join(f.encode() + b"\0" for f in files) if files is not None else b""
        self._rsync(command, data, timeout, target)

    def pull(self, source: str, target: str, filters: list[str], timeout: float = 600) -> None:
        command = ["rsync", "-a", "-s", "-e", openssh.rsync_shell([*self.ssh.words,
                                                                    *self.ssh.sharing]),
                   *filters, f"{self.host}:{source.rstrip('/')}/", target.rstrip("/") + "/"]
        self._rsync(command, b"", timeout, source)

    def _rsync(self, command: list[str], data: bytes, timeout: float, far: str) -> None:
        try:
            proc = tools.run(command, timeout, input=data)
        except FileNotFoundError:
            raise HpctrainError("'rsync' is not installed here; submitting through a login node "
                                "copies the code with it",
                                fix="install rsync (Debian: rsync), here and on the login node"
                                ) from None
        except subprocess.TimeoutExpired:
            raise SchedulerError(command[:1], None, f"rsync with {self.host} did not finish "
                                 f"within {timeout:.0f} s") from None
        except OSError as exc:
            raise SchedulerError(command[:1], None, f"rsync with {self.host}: {exc}") from None
        if proc.returncode == 0:
            return
        said = " ".join(proc.stderr.decode(errors="replace").split())
        if "No space left on device" in said or "Disk quota exceeded" in said:
            raise SchedulerError(command[:1], proc.returncode, said,
                                 what=f"the cluster's disk is full at {far} on {self.host} "
                                 f"({said[-300:]})",
                                 fix="free space there (old runs under remote.runs_dir), or set "
                                 "remote.runs_dir to a filesystem with room")
        if proc.returncode == 255 or "connection unexpectedly closed" in said \
                or "Connection refused" in said or "Could not resolve" in said:
            what, fix = openssh.explain(self.host, said, self.connect_timeout)
            raise SchedulerError(command[:1], proc.returncode, said,
                                 what=f"cannot reach the login node: {what}", fix=fix)
        raise SchedulerError(command[:1], proc.returncode, said,
                             what=f"rsync with {self.host} failed (exit {proc.returncode}): "
                             f"{said[-400:]}")


# ----------------------------------------------------------------------------- the code

def code_files(workdir: str, exclude: list[str], skip: list[Path]) -> tuple[list[str], int]:
    """The working directory's files a job needs (relative paths) and their total size: what
    git tracks or would track (.gitignore respected) in a checkout, every file otherwise; never
    .git, the site's remote.exclude patterns, or the runs directory here (`skip`)."""
    import fnmatch
    root = Path(workdir)
    names = _git_files(root)
    if names is None:
        names = []
        for top, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if d != ".git"]
            rel = Path(top).relative_to(root)
            names += [str(rel / f) if str(rel) != "." else f for f in files]
    skipped = []
    for p in skip:
        try:
            skipped.append(str(Path(p).absolute().relative_to(root.absolute())) + "/")
        except ValueError:
            pass

    def left_out(name: str) -> bool:
        if any(name.startswith(s) for s in skipped):
            return True
        parts = name.split("/")
        for pattern in exclude:
            if pattern.endswith("/"):
                if any(fnmatch.fnmatch(d, pattern.rstrip("/")) or
                       fnmatch.fnmatch("/".join(parts[:i + 1]), pattern.strip("/"))
                       for i, d in enumerate(parts[:-1])):
                    return True
            elif fnmatch.fnmatch(name, pattern.lstrip("/")) or fnmatch.fnmatch(parts[-1], pattern):
                return True
        return False

    kept, total = [], 0
    for name in sorted(set(names)):
        if left_out(name):
            continue
        try:
            st = (root / name).lstat()
        except OSError:  # tracked but deleted here
            continue
        kept.append(name)
        total += st.st_size
    return kept, total


def _git_files(root: Path) -> list[str] | None:
    try:
        proc = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                              cwd=root, capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    return [n for n in proc.stdout.decode(errors="surrogateescape").split("\0") if n]


def _mib(n: int) -> str:
    return f"{n / 1048576:.1f} MiB"


def check_code_size(workdir: str, files: list[str], total: int, cap_mb: int, where) -> None:
    if total <= cap_mb * 1048576:
        return
    sizes = []
    for name in files:
        try:
            sizes.append(((Path(workdir) / name).lstat().st_size, name))
        except OSError:
            pass
    largest = ", ".join(f"{n} ({_mib(s)})" for s, n in sorted(sizes, reverse=True)[:5])
    raise HpctrainError(f"the code to copy to the cluster is {_mib(total)} in {len(files)} files "
                        f"(from {workdir}), over the site's remote.code_max_mb of {cap_mb} MiB; "
                        f"largest: {largest}", where,
                        "leave data and checkpoints out (.gitignore, or the site's "
                        "remote.exclude), or raise remote.code_max_mb")


# ----------------------------------------------------------------------------- the backend

class RemoteBackend(Backend):
    """A scheduler's backend answered through its login node: the same code, with every tool
    run there and the run's files fetched here."""

    name = "remote"
    script_name = ""

    def __init__(self, inner: Backend, far: dict):
        self.inner, self.far = inner, far
        self.name, self.script_name = inner.name, inner.script_name
        self.login = Login(far)

    def submit_command(self, script: Path, plan=None) -> list[str]:
        return ["ssh", self.far["login"], "--", *self.inner.submit_command(script, plan)]

    def submit(self, run: Run, prep) -> str:
        self.stage(run, prep)
        secrets = {name: os.environ.get(name, "") for name in prep.plan.secrets}
        if prep.plan.notify and os.environ.get(prep.plan.notify["url_from"]):
            # The job's webhook URL (notify.url_from) travels like a secret: by name, on stdin.
            name = prep.plan.notify["url_from"]
            secrets[name] = os.environ[name]
        with commands.on(self.login.with_env(secrets)):
            return self.inner.submit(run, prep)

    def stage(self, run: Run, prep) -> None:
        """The login node checked (its tool, the run directory, the cluster's Python), then the
        run directory written here and the job's code copied to the cluster."""
        job, far_dir = prep.job, Path(self.far["path"])
        where = job.origins.site(("login",)) if job.origins is not None else None
        run.update(extra=dict(run.record.extra, remote=self.far))
        files, total = code_files(job.workdir, list(job.site.remote.exclude),
                                  [run.path.parent.parent])
        check_code_size(job.workdir, files, total, job.site.remote.code_max_mb, where)
        python = prep.plan.python
        try:
            version = self.login.probe("sbatch", far_dir / CODE, python)
        except SchedulerError as exc:
            raise HpctrainError(exc.what, where, exc.fix) from None
        if prep.function is not None:
            _check_python(version, python, where)
        try:
            self.login.push(str(run.path), str(far_dir), excludes=["/.submitting"])
            self.login.push(job.workdir, str(far_dir / CODE), files=files)
        except SchedulerError as exc:
            raise HpctrainError(exc.what, where, exc.fix) from None
        run.update(extra=dict(run.record.extra, remote=dict(
            self.far, code={"from": job.workdir, "files": len(files), "bytes": total},
            python=version)))

    def shell_command(self, plan, rcfile: Path, record: Path) -> list[str]:
        """The scheduler's shell command run on the login node, over the shared connection,
        with a terminal (-tt): a closed terminal or a dropped connection hangs up the remote
        session, and salloc releases the allocation on that SIGHUP as it does here."""
        ssh = self.login.ssh
        command = ssh.command(self.login.host, self.inner.shell_command(plan, rcfile, record))
        at = command.index("--")
        return [*command[:at], "-tt", *command[at:]]

    def resubmit(self, run: Run, exclude: list[str]) -> str:
        """`submit --resume` of a run on the cluster: its script submitted again there, by the
        login node's sbatch, with the secrets as submit gives them (stdin, never a file); the
        mirror's decisions (status/excluded.json) first copied there, and the ended attempt's
        failure.json archived there as here, so that status speaks of the new job."""
        from ...runs.untrusted import job_notify_var, job_secrets
        far_dir = Path(self.far["path"])
        secrets = {name: os.environ.get(name, "") for name in job_secrets(run.path)}
        hook = job_notify_var(run.path)
        if hook and os.environ.get(hook):
            secrets[hook] = os.environ[hook]
        try:
            if (run.path / "status" / "excluded.json").is_file():
                self.login.push(str(run.path / "status"), str(far_dir / "status"),
                                files=["excluded.json"])
            self.login.tool(["bash", "-c", _ARCHIVE, "hpctrain", str(far_dir / "status")])
        except SchedulerError as exc:
            raise HpctrainError(exc.what, fix=exc.fix) from None
        with commands.on(self.login.with_env(secrets)):
            return self.inner.resubmit(Run(far_dir), exclude)

    def states(self, runs: list[Run]) -> list[JobState]:
        # Fetched before asking (a function run whose job Slurm forgot is judged by its result
        # pickles) and again for those that ended (their last lines and results).
        problems = {run.path: self._try_fetch(run) for run in runs}
        with commands.on(self.login):
            answers = self.inner.states(runs)
        for run, state in zip(runs, answers):
            if state.done:
                problems[run.path] = self._try_fetch(run)
            if problems[run.path] and not state.reason:
                state.reason = f"cannot fetch its files: {problems[run.path]}"
        return answers

    def _try_fetch(self, run: Run) -> str | None:
        try:
            self.fetch(run)
        except SchedulerError as exc:
            return exc.what
        return None

    def adopt(self, run: Run) -> str | None:
        with commands.on(self.login):
            return self.inner.adopt(Run(Path(self.far["path"])))

    def cancel(self, run: Run) -> None:
        with commands.on(self.login):
            self.inner.cancel(run)

    def abort(self, job_id: str) -> None:
        with commands.on(self.login):
            self.inner.abort(job_id)

    def output_files(self, run: Run, task: int | None = None) -> list[Path]:
        return self.inner.output_files(run, task)

    def fetch(self, run: Run) -> None:
        """The run's logs, records and results from the cluster into its mirror here (from
        that run's own directory there: runs asked in one group share only the login node)."""
        far = checked_far(run.record.extra.get("remote"), f"{run.path / 'run.json'}: 'remote")
        self.login.pull(far["path"], str(run.path), _FETCHED)

    def refresh(self, run: Run) -> str | None:
        """Fetch while `logs -f` follows (at most once a second); a lost connection is said once
        and tried again on every later call (ssh makes a new one), and so is its return."""
        import time
        now = time.monotonic()
        if now - getattr(self, "_fetched", 0.0) < 1.0:
            return None
        self._fetched = now
        lost = getattr(self, "_lost", None)
        try:
            self.fetch(run)
        except SchedulerError as exc:
            self._lost = exc.what
            if lost is None:
                return (f"hpctrain: lost the connection to {self.far['login']} ({exc.what}); "
                        "trying again")
            return None
        if lost is not None:
            self._lost = None
            return f"hpctrain: reconnected to {self.far['login']}"
        return None


def _check_python(version: str | None, python: list[str], where) -> None:
    """A function is pickled here and unpickled there: the same Python minor version, or the
    job would fail on the nodes with an unpickling traceback."""
    here = "%d.%d" % sys.version_info[:2]
    if version is None:
        raise HpctrainError(f"the job's Python ({' '.join(python)}) does not run on the login "
                            "node, so the version that will unpickle the function is unknown",
                            where, "set the job's python: to the cluster's interpreter (the "
                            "login node must see it too)")
    if version != here:
        raise HpctrainError(f"the cluster's Python is {version} ({' '.join(python)}) and this "
                            f"one is {here}: a function pickled here cannot be unpickled there",
                            where, f"run this notebook/script with Python {version}, or set the "
                            f"job's python: to a Python {here} on the cluster")
