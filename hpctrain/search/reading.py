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
a run directory, a link is followed to a regular file, which may be someone else's.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable

from ..errors import HpctrainError
from ..runs.untrusted import Unreadable, excerpt, open_regular
from . import spaces
from .journal import JOURNAL, MAX_JOURNAL, journal_path  # the workers' file and its bound


def _damaged(path, what: str) -> HpctrainError:
    return HpctrainError(f"the study's journal {path} is damaged: {what}",
                         fix="the workers append to it whole lines of JSON; restore it from a "
                         "copy, or look at it with optuna-dashboard; nothing in it is ever run")


def parse(data: bytes, path) -> list[dict]:
    """The journal's records, in order: its last line left out when it has no newline (a writer
    killed mid-line); any other line that is not a JSON object is an error naming the line."""
    lines = data.split(b"\n")
    lines.pop()  # what follows the last newline: b"" or a line cut short
    logs: list[dict] = []
    for number, line in enumerate(lines, start=1):
        try:
            log = json.loads(line)
        except (ValueError, RecursionError):
            # Its text is not quoted: the path may be a link to someone else's file.
            raise _damaged(path, f"line {number} is not JSON") from None
        if not isinstance(log, dict):
            raise _damaged(path, f"line {number} is not a JSON object")
        logs.append(log)
    return logs


def _read(path) -> bytes:
    """The journal's bytes: a regular file (runs/untrusted.open_regular) whose size says at once
    whether it is within the bound, so that a huge one is refused without reading it."""
    with open_regular(path) as f:
        if os.fstat(f.fileno()).st_size > MAX_JOURNAL:
            raise Unreadable(0, f"{path} is larger than {MAX_JOURNAL >> 20} MiB")
        data = f.read(MAX_JOURNAL + 1)  # a file that grew since: still bounded
    if len(data) > MAX_JOURNAL:
        raise Unreadable(0, f"{path} is larger than {MAX_JOURNAL >> 20} MiB")
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


def load(run_path, run_id: str):
    """The study named `run_id` (or the journal's only study) as an optuna.Study over the
    journal's records as they are now, and its trials (FrozenTrial: values unchecked). HpctrainError when the journal is missing, not a regular
    file, too large or damaged."""
    path = journal_path(run_path)
    try:
        data = _read(path)
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
            raise _damaged(path, f"it holds {len(names)} studies and none is named {run_id}")
        study = optuna.load_study(study_name=name, storage=storage,
                                  sampler=optuna.samplers.RandomSampler())
        return study, study.get_trials(deepcopy=False)
    except HpctrainError:
        raise
    except Exception as exc:  # noqa: BLE001 — any record Optuna cannot replay is damage, not a bug
        raise _damaged(path, f"Optuna cannot replay it ({type(exc).__name__}: "
                       f"{excerpt(str(exc), 120)})") from None
