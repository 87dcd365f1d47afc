"""A study's journal read for following it (`status`, `list`, `report`, `plot`, the Python
Study): once, bounded, read-only, and checked — the journal is untrusted like the rest of a run
directory.

Optuna's JournalFileBackend would open the file itself: create it when it is missing, open a FIFO
put in its place (and wait for ever), read a file of any size, and raise its own errors on a
damaged line. So the bytes are read here once, through runs/untrusted.py (a regular file only,
at most MAX_JOURNAL bytes), and handed to Optuna's JournalStorage through a backend that only
holds them (Optuna's public BaseJournalBackend): nothing is written, no lock is taken (a reader
needs none: the workers append whole lines under their lock), and nothing is unpickled (the
pickled snapshots are a feature of backends that implement BaseJournalSnapshot; this one does
not). Every value taken out of the study is then checked and bounded before it is shown (see
follow.py).

A worker killed while it appended leaves a last line without its newline: that line is left out,
as Optuna itself does. Any other line that is not JSON, or a record Optuna cannot replay, is a
damaged journal: one error naming the file and the line — never quoting it: like every read of
a run directory, a link is followed to a regular file, which may be someone else's. What Optuna
would then hold in memory is bounded before it is handed over: the bytes (MAX_JOURNAL, from the
file's size, before reading), the lines, the trials, and how deep one record nests.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any, Iterable

from ..errors import HpctrainError
from ..runs.untrusted import Unreadable, excerpt, json_record, open_regular
from . import spaces
from .journal import JOURNAL, MAX_JOURNAL, damaged, journal_path, too_large  # the workers' file

MAX_RECORDS = 1_000_000  # lines: a journal of MAX_JOURNAL bytes holds some 400,000
MAX_TRIALS = 100_000  # trials replayed, each a FrozenTrial in memory (a real trial's records
# take ~1.5 KB: MAX_JOURNAL holds some 40,000 of them)


def parse(data: bytes, path) -> list[dict]:
    """The journal's records, in order: its last line left out when it has no newline (a writer
    killed mid-line); any other line that is not a JSON object, or nests deeper than a record
    does, is an error naming the line. More than MAX_RECORDS lines, or MAX_TRIALS trials, is
    refused before Optuna holds them all."""
    if data.count(b"\n") > MAX_RECORDS:
        raise damaged(path, f"it holds more than {MAX_RECORDS} lines (a study writes fewer)")
    lines = data.split(b"\n")
    lines.pop()  # what follows the last newline: b"" or a line cut short
    logs: list[dict] = []
    trials = 0
    for number, line in enumerate(lines, start=1):
        try:
            log = json_record(line)
        except ValueError:
            # Its text is not quoted: the path may be a link to someone else's file.
            raise damaged(path, f"line {number} is not JSON of a journal record "
                          "(not JSON, or nested too deeply)") from None
        if not isinstance(log, dict):
            raise damaged(path, f"line {number} is not a JSON object")
        if log.get("op_code") == 4:  # Optuna's "create trial"
            trials += 1
            if trials > MAX_TRIALS:
                raise damaged(path, f"it holds more than {MAX_TRIALS} trials (hpctrain reads "
                              "studies up to that many)")
        logs.append(log)
    return logs


def size(run_path) -> int | None:
    """The journal's size as the file system tells it (nothing read); None when there is none
    or it is not a regular file (reading it says what it is)."""
    try:
        st = os.lstat(journal_path(run_path))
    except OSError:
        return None
    return st.st_size if stat.S_ISREG(st.st_mode) else None


def _read(path, limit: int = MAX_JOURNAL) -> bytes:
    """The journal's bytes: a regular file (runs/untrusted.open_regular) whose size says at once
    whether it is within the bound, so that a huge one is refused without reading it."""
    with open_regular(path) as f:
        size = os.fstat(f.fileno()).st_size
        if size > limit:
            raise too_large(path, size, limit)
        data = f.read(limit + 1)  # a file that grew since: still bounded
    if len(data) > limit:
        raise too_large(path, len(data), limit)
    return data


def _backend(logs: list[dict]):
    from optuna.storages.journal import BaseJournalBackend

    class Held(BaseJournalBackend):
        """The journal's records, already read: Optuna replays them and writes nothing."""

        def read_logs(self, log_number_from: int) -> Iterable[dict[str, Any]]:
            return logs[log_number_from:]

        def append_logs(self, logs: list[dict[str, Any]]) -> None:
            raise PermissionError("a study is followed read-only")

    return Held()


def load(run_path, run_id: str, limit: int = MAX_JOURNAL):
    """The study named `run_id` (or the journal's only study) as an optuna.Study over the
    journal's records as they are now, and its trials (FrozenTrial: values unchecked). HpctrainError when the journal is missing, not a regular
    file, too large or damaged."""
    path = journal_path(run_path)
    try:
        data = _read(path, limit)
    except FileNotFoundError:
        raise HpctrainError(f"{Path(run_path).name} is not a study: it has no {JOURNAL}",
                            str(path), "status, logs, plot and report follow it as a plain "
                            "run; a study is submitted from a job with a search: section") from None
    except Unreadable as exc:
        raise HpctrainError(f"cannot read the study's journal: {exc}",
                            fix="the workers keep it a regular file of JSON lines; restore it "
                            "from a copy") from None
    except OSError as exc:
        raise HpctrainError(f"cannot read the study's journal {path}: {exc.strerror or exc}",
                            fix="make it readable (ask whoever owns the run)") from None
    logs = parse(data, path)
    optuna = spaces.optuna()
    try:
        storage = optuna.storages.JournalStorage(_backend(logs))
        names = optuna.get_all_study_names(storage)
        name = run_id if run_id in names else (names[0] if len(names) == 1 else None)
        if name is None:
            raise damaged(path, f"it holds {len(names)} studies and none is named {run_id}")
        study = optuna.load_study(study_name=name, storage=storage,
                                  sampler=optuna.samplers.RandomSampler())
        return study, study.get_trials(deepcopy=False)
    except HpctrainError:
        raise
    except Exception as exc:  # noqa: BLE001 — any record Optuna cannot replay is damage, not a bug
        raise damaged(path, f"Optuna cannot replay it ({type(exc).__name__}: "
                       f"{excerpt(str(exc), 120)})") from None
