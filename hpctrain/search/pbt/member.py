"""One member of a population (search.method pbt): a worker of the study (one allocation of the
job's shape: a Slurm array task, or a process on the local site) training one run, trials/<i>/.

    python -m hpctrain.search.pbt.member RUN_DIR MEMBER

It starts the job's own launch with the member's values and follows rank 0's progress. Each time
the step passes an interval, it copies the member's newest settled checkpoint into the workspace
and records (interval, step, score, values, checkpoint) in its lineage. If its score is then in
the bottom fraction, each other member's newest record compared with what this member held at
the same interval, its ranks are signalled to save and end (as
on a preemption), the chosen top member's recorded checkpoint is copied into its own directory
(where the library's resume looks: it is the newest there), its values are explored from that
member's, and the launch starts again: the library resumes from that checkpoint with the new
values; else it records why it kept on. Members never wait for one another: each compares with
the others' newest records.

A crash restarts the member from its own newest checkpoint with its values, or from a top
member's when it has none yet; a signal to the member (preemption, cancel) goes on to its ranks,
which save, and the member's values stay in its lineage for the next start (a requeue of its
array task, `submit --resume`).
"""
from __future__ import annotations

import glob
import os
import random
import signal
import stat
import sys
import time
from pathlib import Path

from ...errors import HpctrainError
from ...job.search import max_failures
from ...rank.end.checkpoints import being_written
from ...rank.records import read_job_failure
from ...runs import tree
from ...runs.records import trial_dir
from ..allocation import POLL, Allocation, log
from ..rules import ranked
from ..trials import reported, study_search, write_trial
from ..worker import main as worker_main
from . import explore, lineage
from .lineage import Record

SETTLE = 1.0  # seconds a checkpoint file stays unchanged before it is taken as whole


class Member:
    """A population's member (search/methods.py: method pbt): no Optuna study; its record is
    its lineage."""
    why = ""  # why its newest judgment did not copy (copy_a_top_member)

    def __init__(self, run_dir: str, index: int):
        self.run_dir = Path(run_dir)
        self.index = index
        self.study_job, self.search = study_search(run_dir)
        self.alloc = Allocation.of_study(self.run_dir, self.study_job, index)
        self.pbt = self.search.pbt
        self.dir = trial_dir(self.run_dir, index)
        try:
            self.history = lineage.read(self.run_dir, index)
        except OSError as exc:
            raise HpctrainError(f"member {index}'s history cannot be read: {exc}",
                                fix="restore it, or remove it (the member starts afresh)") from None
        seed = self.search.seed
        # A member's draws are its own, and differ again after each restart of it.
        self.rng = random.Random(seed * 1_000_003 + index * 10_007 + len(self.history)
                                 if seed is not None else None)
        self.patterns: list[str] = []
        self.stopped = False  # its ranks were ended to copy another member (not a crash)
        # The interval of the checkpoint its next launch starts from, when that is a copy of
        # another member's (with new values); else None.
        self.copied: int | None = None

    # --- records
    def record(self, event: str, params: dict, **fields) -> Record:
        rec = Record(member=self.index, event=event, time=time.time(), params=dict(params), **fields)
        lineage.append(self.run_dir, rec)
        self.history.append(rec)
        return rec

    def records(self) -> dict[int, list[Record]]:
        """Every member's history as its lineage file tells it, this member's as it holds it.
        Another member's file that cannot be read leaves that member out (strict=False)."""
        out = lineage.read_all(self.run_dir, self.search.parallel, strict=False)
        out[self.index] = self.history
        return out

    def newest_scores(self, upto: int | None = None,
                      records: dict[int, list[Record]] | None = None
                      ) -> dict[int, tuple[float, Record]]:
        """Every member's newest record with a score and a checkpoint (explore.newest); with
        `upto`, its newest at an interval no later than that one."""
        out = {}
        for m, recs in (self.records() if records is None else records).items():
            rec = explore.newest(recs, upto)
            if rec is not None:
                out[m] = (rec.score, rec)
        return out

    # --- checkpoints
    def settled_checkpoint(self, settle: float = SETTLE) -> str | None:
        """The member's newest checkpoint unchanged for `settle` seconds (one still being
        written is left for the next look), as a path inside its directory."""
        now = time.time()
        found = []
        for pattern in self.patterns:
            full = pattern if os.path.isabs(pattern) else str(self.dir / pattern)
            for path in glob.glob(full, recursive=True):
                if being_written(os.path.basename(path)):
                    continue
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                if os.path.isfile(path) and not os.path.islink(path) and st.st_size > 0 \
                        and now - st.st_mtime >= settle:
                    found.append((st.st_mtime_ns, path))
        for _, path in sorted(found, reverse=True):
            rel = os.path.relpath(path, self.dir)
            if lineage.good_rel(rel):
                return rel
        return None

    def save_to_workspace(self, interval: int, rel: str) -> bool:
        try:
            lineage.copy_file(self.dir / rel, lineage.saved_path(self.run_dir, self.index,
                                                                 interval, rel), self.run_dir)
            self.touch_slot(interval)
        except (OSError, ValueError) as exc:
            log(f"checkpoint {rel} not recorded: {exc}")
            return False
        self.prune_workspace()
        return True

    def touch_slot(self, interval: int, parent: int | None = None) -> None:
        """That slot is this member's newest written (pruning goes by time)."""
        tree.touch(self.workspace() / lineage.slot(interval, parent), self.run_dir)

    def workspace(self):
        return lineage.population_dir(self.run_dir) / "checkpoints" / str(self.index)

    def prune_workspace(self) -> None:
        """Keep the `keep` checkpoints of this member written last (others copy only its newest
        record's). By time, not by interval: a copy of a member behind it lies in an older
        interval's slot, and is its newest record's all the same."""
        mine = self.workspace()
        try:  # entered without following a link: a link planted there lists nothing of its target
            found = tree.entries(mine, self.run_dir)
        except OSError as exc:
            log(f"member {self.index}: its workspace is not pruned: {exc}")
            return
        slots = [(st.st_mtime_ns, name) for name, st in found
                 if lineage.SLOT.fullmatch(name) and stat.S_ISDIR(st.st_mode)]
        for _, name in sorted(slots)[:-self.pbt.keep]:
            try:
                tree.remove(mine / name, self.run_dir)  # no link inside it is followed
            except OSError as exc:
                log(f"member {self.index}: slot {name} not removed: {exc}")

    def stage(self, parent: int, rec: Record) -> bool:
        """Copy member `parent`'s recorded checkpoint into this member's own workspace slot of
        that interval, while this member's ranks still train: a copy that fails (the parent
        pruned it meanwhile, a full disk) leaves this member training as it was."""
        try:
            lineage.copy_file(lineage.record_path(self.run_dir, rec),
                              lineage.saved_path(self.run_dir, self.index, rec.interval,
                                                 rec.checkpoint, parent), self.run_dir)
            self.touch_slot(rec.interval, parent)
            return True
        except (OSError, ValueError) as exc:
            log(f"could not copy member {parent}'s checkpoint: {exc}")
            return False

    def take(self, rec: Record) -> bool:
        """The staged checkpoint into this member's directory, at the same place in it, so that
        it is the newest there: the library's resume takes it."""
        try:
            dst = self.dir / rec.checkpoint
            lineage.copy_file(lineage.saved_path(self.run_dir, self.index, rec.interval,
                                                 rec.checkpoint, rec.member), dst, self.run_dir)
            tree.touch(dst, self.run_dir)  # newer than this member's own, whatever the copy kept
            self.prune_workspace()
            return True
        except (OSError, ValueError) as exc:
            log(f"could not place the copied checkpoint: {exc}")
            return False

    # --- the loop
    def current(self) -> dict | None:
        return dict(self.history[-1].params) if self.history else None

    def stop_leftover_ranks(self, wait: float = 120.0) -> None:
        """Here (the local site), a member killed -9 leaves its ranks training in its directory:
        they are asked to save and end (SIGTERM) before this member starts again there, as two
        trainings in one directory would write over each other's checkpoints. Under a scheduler
        the killed allocation's processes went with it."""
        if not self.alloc.backend.runs_here:
            return
        from ...backends.local import processes_of
        pids = processes_of(self.dir)
        if not pids:
            return
        log(f"member {self.index}: its previous ranks still run (pids {pids[:8]}); they save "
            "and end first")
        deadline, sig = time.time() + wait, signal.SIGTERM
        while pids:
            if sig is not None:  # once each: a second SIGTERM could cut a save short
                for pid in pids:
                    try:
                        os.kill(pid, sig)
                    except ProcessLookupError:
                        pass
                sig = None
            time.sleep(POLL)
            if deadline is not None and time.time() > deadline:
                deadline, sig = None, signal.SIGKILL  # they did not end when asked
            pids = processes_of(self.dir)

    @property
    def signalled(self) -> int | None:
        return self.alloc.signalled

    def run(self) -> int:
        self.alloc.install()
        self.stop_leftover_ranks()
        params = self.current()
        if self.history and self.history[-1].event in lineage.ENDED:
            log(f"member {self.index} has ended ({self.history[-1].event})")
            return 0
        if params is None:
            params = explore.initial(self.search, self.rng)
            self.record("start", params)
        else:
            log(f"member {self.index} continues with {params} from its newest checkpoint")
            self.record("restart", params, note="continued (requeue or --resume)")
        crashes = 0
        while self.signalled is None:
            outcome, params = self.segment(params)
            if outcome == "ended":
                return 0
            if outcome == "signalled":
                return self.alloc.after_signal(f"trial {self.index}")
            if outcome == "exploit":
                crashes = 0
                continue
            crashes += 1  # a crash: "crashed"
            if crashes >= max_failures(self.search):
                self.record("failed", params, note=f"{crashes} crashes in a row")
                log(f"member {self.index}: {crashes} crashes in a row; it stops")
                return 1
            time.sleep(SETTLE)  # its ranks have ended: what they wrote last settles now
            if self.settled_checkpoint() is None:
                picked = self.copy_a_top_member(params, force=True)
                if picked is not None:
                    params = picked
                    continue
            self.record("restart", params, note="after a crash, from its newest checkpoint")
        return self.alloc.after_signal(f"trial {self.index}") if self.signalled is not None else 0

    def copy_a_top_member(self, params: dict, force: bool = False, upto: int | None = None,
                          stop=None) -> dict | None:
        """Exploit and explore: the new values when this member copied a top member, else None
        (and `self.why` says why not). At its record of interval `upto` (by default its newest)
        it is judged against every other member's newest record, each compared at the newest
        interval both reached (explore.margins); in the bottom fraction, it copies one of the
        top fraction, that member's newest checkpoint (its freshest state, one its pruning
        keeps), taking one at or past its own interval when a top member is there. A copy of a
        member behind it takes it back in steps, as asynchronous PBT does: a member ahead of
        the others but worse is not left training a poor value to the end. Two members cannot
        copy each other's older record forever: a member that has just copied is compared only
        once it trained its values, and a copy holds its parent's score at the copied interval.
        `stop()` ends this member's running ranks once the copy is staged.
        force: a member with no checkpoint of its own after a crash copies the best one."""
        records = self.records()
        newest = {m: rec for m, (_, rec) in self.newest_scores(records=records).items()}
        if force:
            latest = {m: rec.score for m, rec in newest.items()}
            others = [m for m in ranked(latest, self.search.direction) if m != self.index]
            parent, self.why = (others[0], "") if others else (
                None, "no other member has a checkpoint to copy")
        else:
            if upto is None:
                upto = newest[self.index].interval if self.index in newest else 0
            ahead = {m for m, rec in newest.items() if rec.interval >= upto}
            parent, self.why = explore.decide(
                self.index, explore.margins(self.index, records, upto, self.search.direction),
                self.search.parallel, self.pbt.fraction, "maximize", self.rng, prefer=ahead)
        if parent is None:
            return None
        rec = newest[parent]
        if not self.stage(parent, rec):
            self.why = f"member {parent}'s checkpoint could not be copied"
            return None
        if stop is not None:
            stop()  # its ranks save and end, as on a preemption
        new, fresh = explore.explored(self.search, explore.trained_values(records, rec),
                                      self.rng)
        if not self.take(rec):
            self.why = f"member {parent}'s copied checkpoint could not be placed"
            return None
        self.record("exploit", new, interval=rec.interval, step=rec.step, score=rec.score,
                    parent=parent, parent_interval=rec.interval, checkpoint=rec.checkpoint,
                    resampled=fresh,
                    note="after a crash with no checkpoint of its own" if force else "")
        self.copied = rec.interval
        log(f"member {self.index} copies member {parent} (interval {rec.interval}, "
            f"{self.search.metric} {rec.score}) and continues with {new}")
        return new

    def kept(self, params: dict, interval: int) -> None:
        """Record why this member did not copy at `interval` (`status` shows the newest), once
        for each reason there: a member judged again as others reach its interval may keep for
        the same reason each time."""
        why = self.why[:lineage.MAX_WHY]
        if not why:
            return
        for rec in reversed(self.history):
            if rec.event != "kept" or rec.interval != interval:
                break
            if rec.why == why:
                return
        self.record("kept", params, interval=interval, why=why)

    def clear_progress(self) -> None:
        """The previous launch's progress records, so that the next one's steps are its own."""
        status = self.dir / "status"
        try:
            for name, _ in tree.entries(status, self.run_dir):
                if name.startswith("progress-") and name.endswith(".json"):
                    tree.remove(status / name, self.run_dir)  # a link: the link, not its target
        except OSError as exc:
            log(f"member {self.index}: its progress records not cleared: {exc}")

    def segment(self, params: dict) -> tuple[str, dict]:
        """One launch of the member with `params`, until it ends, crashes, is signalled or
        copies another member: (outcome, the values it continues with)."""
        try:
            script, plan = write_trial(self.run_dir, self.index, self.study_job, params)
        except Exception as exc:  # a value the job cannot take: a crash of this member
            log(f"member {self.index}: could not prepare its launch: {exc}")
            return "crashed", params
        self.patterns = list(plan.bootstrap.get("checkpoint_patterns") or [])
        self.clear_progress()
        self.stopped = False
        copied, self.copied = self.copied, None
        log(f"member {self.index}: {params}")
        try:
            self.alloc.start(self.index, script)
        except OSError as exc:
            log(f"member {self.index}: cannot open its log: {exc}")
            return "crashed", params
        new = self.follow_member(params, copied)
        status = self.alloc.ended(by_itself=self.signalled is None and new is None
                                  and not self.stopped)
        if self.signalled is not None:
            return "signalled", params
        if new is not None:
            return "exploit", new
        if self.stopped:  # stopped to copy, then the copy could not be placed: it goes on
            self.record("restart", params, note="a copy failed; from its own newest checkpoint")
            return "exploit", params
        if status == 0:
            self.finish(params)
            return "ended", params
        failure = read_job_failure(str(self.dir))
        cause = failure.message if failure and failure.message else f"exit status {status}"
        log(f"member {self.index} crashed: {cause[:400]}")
        return "crashed", params

    def follow_member(self, params: dict, copied: int | None = None) -> dict | None:
        """Record each interval while the launch runs, judged there against the others' newest
        records (copy_a_top_member); the new values when the member copied another (its ranks
        were signalled to save and end), else None. A member that decided before others reached
        its interval decides again as each of them reaches it, until it records the next one.
        Each judgment that does not copy records why (a "kept" record).
        copied: the interval of the copied checkpoint this launch continues from, if any."""
        boundary, pending, reached = None, None, set()
        running = True
        while running:  # one more look once it has ended: what it reported last counts
            running = not self.alloc.wait()
            if self.signalled is not None:
                continue
            seen = reported(self.dir, self.search.metric)
            if seen is None:
                continue
            step, score = seen
            if boundary is None:  # the first step of this launch (it may resume mid-interval)
                boundary = first_boundary(step, self.pbt.interval, copied)
            if step < boundary:
                if pending is not None and len(reached) < self.search.parallel:
                    now = self.reached(pending)
                    if now - reached:
                        reached = now
                        new = self.copy_a_top_member_while_running(params, pending)
                        if new is not None:
                            return new
                        self.kept(params, pending)
                continue
            rel = self.settled_checkpoint()
            interval = step // self.pbt.interval
            if rel is None or not self.save_to_workspace(interval, rel):
                continue  # no whole checkpoint yet: look again
            boundary = (interval + 1) * self.pbt.interval
            self.record("ready", params, interval=interval, step=step, score=score, checkpoint=rel)
            if step >= self.pbt.steps:
                pending = None  # its training is done: it ends on its own, copying nobody
                continue
            pending, reached = interval, self.reached(interval)
            new = self.copy_a_top_member_while_running(params, interval)
            if new is not None:
                return new
            self.kept(params, interval)
        return None

    def reached(self, interval: int) -> set[int]:
        """The members whose newest record is at `interval` or later."""
        return {m for m, (_, rec) in self.newest_scores().items() if rec.interval >= interval}

    def copy_a_top_member_while_running(self, params: dict, interval: int) -> dict | None:
        def stop():
            self.stopped = True
            self.alloc.stop()
        return self.copy_a_top_member(params, upto=interval, stop=stop)

    def finish(self, params: dict) -> None:
        """The launch ended by itself: its final score and checkpoint."""
        seen = reported(self.dir, self.search.metric)
        step, score = seen if seen else (None, None)
        if seen is None:  # it copied a member that had ended: nothing left to train
            last = next((r for r in reversed(self.history) if r.score is not None), None)
            if last is not None:
                step, score = last.step, last.score
        interval = (step // self.pbt.interval) if step is not None else 0
        rel = self.settled_checkpoint(settle=0)  # its ranks have ended: every file is whole
        # Saved into its own slot of that interval, the one its end record names.
        if rel is not None and not self.save_to_workspace(interval, rel):
            rel = None
        self.record("end", params, interval=interval, step=step, score=score, checkpoint=rel)
        log(f"member {self.index} ended at step {step}: {self.search.metric} {score}")


def first_boundary(step: int, interval: int, copied: int | None = None) -> int:
    """The step at which a launch whose first reported step is `step` records its first
    interval. A launch from a copy of another member's checkpoint of interval `copied` is
    judged only after that interval, once its new values have trained a whole interval: the
    copy resumes a little behind the parent's recorded step (its newest settled checkpoint),
    and judged at the next boundary, a step or two on, it would score below the member it
    copied and copy again before its values could show."""
    boundary = (step // interval + 1) * interval
    if copied is not None:
        boundary = max(boundary, (copied + 1) * interval,
                       -(-(step - 1 + interval) // interval) * interval)
    return boundary


def main(argv: list[str]) -> int:
    return worker_main(argv, Member, "hpctrain.search.pbt.member")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
