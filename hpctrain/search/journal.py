"""The study's one store: Optuna's journal file in the run directory (study/journal.log).

JournalFileBackend appends JSON lines under JournalFileOpenLock, an O_EXCL lock file
(study/journal.log.lock), which NFS (v3 and later) honours where SQLite's locks do not; a
participant killed -9 leaves at most a half line, which the reader skips, and a stale lock, which
Optuna breaks after its grace period. The file lies in a run directory, so it is untrusted: it is
opened only as a regular file within a size bound, its folder and the file are made without
following a link, its lock is looked at before each wait (check_lock), and nothing in it is
unpickled (the file backend has no snapshots).
"""
from __future__ import annotations

import os
import stat
import time
from pathlib import Path

from ..errors import HpctrainError
from ..rank.records import open_append, what_it_is
from ..runs import tree
from ..runs.untrusted import Unreadable, open_regular
from .spaces import optuna

JOURNAL = "study/journal.log"
# ~150 bytes a record: some 400,000 records, a study of thousands of trials. Every reader holds
# all of it (Optuna replays the whole journal), some 8 bytes of memory for each byte of it.
MAX_JOURNAL = 64 << 20
LOCK_SUFFIX = ".lock"  # Optuna's lock files are named after the file they lock


def journal_path(run_dir) -> Path:
    return Path(run_dir) / JOURNAL


def damaged(path, what: str) -> HpctrainError:
    return HpctrainError(f"the study's journal {path} is damaged: {what}",
                         fix="the workers append to it whole lines of JSON; restore it from a "
                         "copy, or look at it with optuna-dashboard; nothing in it is ever run")


def too_large(path, size: int, limit: int = MAX_JOURNAL) -> HpctrainError:
    return HpctrainError(f"the study's journal {path} is {size >> 20} MiB, larger than "
                         f"{limit >> 20} MiB (a reader holds all of it in memory)",
                         fix="look at it with optuna-dashboard, or continue the search in a new "
                         "study (submit the job again); restore it from a copy if it grew by "
                         "damage")


def check_journal(path: Path) -> None:
    """A regular file (no link, FIFO or device in its place) within the bound, and its lock
    sound (check_lock); HpctrainError."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None:
        if not stat.S_ISREG(st.st_mode):
            raise HpctrainError(f"{path} is {what_it_is(st.st_mode)}, not a regular file",
                                fix="restore the study's journal (hpctrain writes it), or remove "
                                "that run directory")
        if st.st_size > MAX_JOURNAL:
            raise too_large(path, st.st_size)
        try:
            with open_regular(path):
                pass
        except Unreadable as exc:
            raise HpctrainError(str(exc), fix="restore the study's journal") from None
    check_lock(path)


def check_lock(path: Path) -> None:
    """The lock beside the journal is absent (free), a regular file (held, or left by a writer
    killed -9: Optuna breaks it after its grace period), or Optuna's other lock, a symbolic link
    to this very journal (JournalFileSymlinkLock, as optuna-dashboard takes it). Anything else
    is refused, HpctrainError: Optuna would wait for ever for it to go, and where it cannot
    read the lock's age (a dangling link, a loop) it waits without sleeping, at 100 % CPU."""
    lock = Path(f"{path}{LOCK_SUFFIX}")
    try:
        st = os.lstat(lock)
    except FileNotFoundError:
        return
    if stat.S_ISREG(st.st_mode):
        return
    if stat.S_ISLNK(st.st_mode):
        try:
            if os.path.samefile(lock, path):
                return
        except OSError:
            pass
        what = "a symbolic link to another file" if os.path.exists(lock) else \
            "a symbolic link to nothing (dangling)"
    else:
        what = what_it_is(st.st_mode)
    raise HpctrainError(f"the study's lock {lock} is {what}, not a lock Optuna makes: the "
                        "study's workers would wait on it for ever",
                        fix=f"remove it (rm {lock}) when no worker of the study runs; the "
                        "workers make their own lock file there")


def _lock(path: Path):
    from optuna.storages.journal import JournalFileOpenLock

    class CheckedLock(JournalFileOpenLock):
        """Optuna's O_EXCL lock file, taken as Optuna takes it (made exclusively; broken with
        Optuna's own release once it has not changed for the grace period), with the lock file
        looked at (check_lock) at every wait, not only before the first: Optuna's loop retries
        without sleeping whenever it cannot stat the lock, so a dangling link planted while a
        worker waits would spin that worker at 100 % CPU until its time limit."""

        def acquire(self) -> bool:
            lock = f"{path}{LOCK_SUFFIX}"
            pause, mtime, changed = 0.001, None, time.monotonic()
            while True:
                check_lock(path)
                try:
                    os.close(os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW
                                     | os.O_CLOEXEC))
                    return True
                except FileExistsError:
                    pass
                try:
                    now_mtime = os.lstat(lock).st_mtime
                except FileNotFoundError:
                    continue  # released meanwhile: take it
                if now_mtime != mtime:
                    mtime, changed = now_mtime, time.monotonic()
                elif self.grace_period is not None and time.monotonic() - changed > self.grace_period:
                    try:
                        self.release()  # a holder killed -9 left it
                    except RuntimeError:
                        pass  # another waiter broke it first
                time.sleep(pause)
                pause = min(pause * 2, 1.0)

    return CheckedLock(str(path))


def cut_torn_tail(path: Path, lock) -> bool:
    """A writer killed in the middle of its line leaves a last line without its newline. Optuna
    reads past it while it is last, but the next writer's line would run on from it, and a bad
    line before good ones makes the whole journal unreadable: so a writer first cuts it off,
    under the journal's lock (that record never completed). True when it cut."""
    lock.acquire()
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with open(fd, "rb+") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise Unreadable(0, f"{path} is not a regular file")
            size = f.seek(0, os.SEEK_END)
            if size == 0:
                return False
            f.seek(max(0, size - (1 << 20)))
            tail = f.read()
            if tail.endswith(b"\n"):
                return False
            keep = size - len(tail) + tail.rfind(b"\n") + 1 if b"\n" in tail else 0
            f.truncate(keep)
            return True
    finally:
        lock.release()


def storage(run_dir, writer: bool = False):
    """Optuna's storage on the study's journal. writer: this process appends to it (a worker,
    submit): a line a killed writer left torn is cut off first. HpctrainError for a journal or
    lock that is not what the workers make, or a journal Optuna cannot replay."""
    o = optuna()
    from optuna.storages.journal import JournalFileBackend
    path = journal_path(run_dir)
    try:
        tree.make_dirs(path.parent, run_dir)  # study/ itself: never a link
    except OSError as exc:
        raise HpctrainError(f"cannot make {path.parent}: {exc}",
                            fix="remove what is there (hpctrain makes that folder)") from None
    check_journal(path)
    try:  # made here when missing, as a regular file (Optuna's backend would follow a link)
        open_append(str(path), str(run_dir)).close()
    except OSError as exc:
        raise HpctrainError(f"cannot write the study's journal {path}: {exc}",
                            fix="restore the study's journal (hpctrain writes it)") from None
    lock = _lock(path)
    if writer:
        cut_torn_tail(path, lock)
    backend = JournalFileBackend(str(path), lock_obj=lock)
    # Optuna loads a backend's snapshots with pickle: the file backend has none, and must not.
    assert not hasattr(backend, "load_snapshot")
    try:
        return o.storages.JournalStorage(backend)  # replays every record now
    except HpctrainError:
        raise
    except Exception as exc:  # noqa: BLE001 — a record Optuna cannot replay is damage
        raise damaged(path, f"Optuna cannot replay it ({type(exc).__name__})") from None


def create(run_dir, study_name: str, search) -> None:
    """The study, at submit: its name is the run id; its settings are study user attrs."""
    o = optuna()
    study = o.create_study(storage=storage(run_dir, writer=True), study_name=study_name,
                           direction=search.direction, load_if_exists=True)
    for key in ("metric", "direction", "n_trials", "parallel"):
        study.set_user_attr(key, getattr(search, key))


def load(run_dir, study_name: str, search, worker: int = 0):
    from .spaces import pruner, sampler
    from ..job.search import worker_seed
    import msgspec
    o = optuna()
    store = storage(run_dir, writer=True)
    seed = search.seed
    try:
        if seed is not None:
            # Workers, and a worker again after a requeue or --resume, each sample apart and
            # reproducibly: a seed from the study's, the worker's index and the trials it ran so
            # far (only it adds those: the same whatever the other workers did meanwhile).
            trials = o.load_study(study_name=study_name, storage=store).get_trials(deepcopy=False)
            seed = worker_seed(search.seed, worker, sum(t.user_attrs.get("worker") == worker
                                                        for t in trials))
        return o.load_study(study_name=study_name, storage=store,
                            sampler=sampler(msgspec.structs.replace(search, seed=seed)),
                            pruner=pruner(search))
    except KeyError:
        raise damaged(journal_path(run_dir), f"it holds no study {study_name}") from None
