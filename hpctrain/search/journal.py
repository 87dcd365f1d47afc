"""The study's one store: Optuna's journal file in the run directory (study/journal.log).

JournalFileBackend appends JSON lines under JournalFileOpenLock, an O_EXCL lock file, which NFS
(v3 and later) honours where SQLite's locks do not; a participant killed -9 leaves at most a
half line, which the reader skips, and a stale lock, which Optuna breaks after its grace period.
The file lies in a run directory, so it is untrusted: it is opened only as a regular file
within a size bound, and nothing in it is unpickled (the file backend has no snapshots).
"""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import HpctrainError
from ..runs.untrusted import Unreadable, open_regular
from .spaces import optuna

JOURNAL = "study/journal.log"
MAX_JOURNAL = 256 << 20  # ~1 KB a trial report: far beyond any study


def journal_path(run_dir) -> Path:
    return Path(run_dir) / JOURNAL


def check_journal(path: Path) -> None:
    """A regular file (no link, FIFO or device in its place) within the bound; HpctrainError."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not os.path.isfile(path) or os.path.islink(path):
        raise HpctrainError(f"{path} is not a regular file", fix="restore the study's "
                            "journal (hpctrain writes it), or remove that run directory")
    if st.st_size > MAX_JOURNAL:
        raise HpctrainError(f"{path} is {st.st_size} bytes, more than a study writes "
                            f"({MAX_JOURNAL} at most)", fix="restore the study's journal")
    try:
        with open_regular(path):
            pass
    except Unreadable as exc:
        raise HpctrainError(str(exc), fix="restore the study's journal") from None


def cut_torn_tail(path: Path, lock) -> bool:
    """A writer killed in the middle of its line leaves a last line without its newline. Optuna
    reads past it while it is last, but the next writer's line would run on from it, and a bad
    line before good ones makes the whole journal unreadable: so a writer first cuts it off,
    under the journal's lock (that record never completed). True when it cut."""
    lock.acquire()
    try:
        with open(path, "rb+") as f:  # check_journal: a regular file, no link
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
    submit): a line a killed writer left torn is cut off first."""
    o = optuna()
    from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock
    path = journal_path(run_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    check_journal(path)
    lock = JournalFileOpenLock(str(path))
    if writer and path.exists():
        cut_torn_tail(path, lock)
    backend = JournalFileBackend(str(path), lock_obj=lock)
    # Optuna loads a backend's snapshots with pickle: the file backend has none, and must not.
    assert not hasattr(backend, "load_snapshot")
    return o.storages.JournalStorage(backend)


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
    if seed is not None:
        # Workers, and a worker again after a requeue or --resume, each sample apart and
        # reproducibly: a seed from the study's, the worker's index and the trials it ran so far
        # (only it adds those: the same whatever the other workers did meanwhile).
        trials = o.load_study(study_name=study_name, storage=store).get_trials(deepcopy=False)
        seed = worker_seed(search.seed, worker, sum(t.user_attrs.get("worker") == worker
                                                    for t in trials))
    return o.load_study(study_name=study_name, storage=store,
                        sampler=sampler(msgspec.structs.replace(search, seed=seed)),
                        pruner=pruner(search))
