"""How runs are shown on a terminal: one phrase for a state and for training progress, a run's
page, a table of runs, and the lines `submit --wait` prints while it follows a run.

What identifies a run (its name, run id, job id, site) is never cut: a column is as wide as its
longest value, and the rest of a line keeps to 80 columns.

Most of what is shown comes from outside (run records, the ranks' metric names, Slurm's node
names and reasons, the tools' words): every text leaves here through rank/printable.py, which
shows a character a terminal would act on (ESC, CSI, BEL, bidi overrides) as '?'. One such
character becomes one '?', so the columns stay aligned.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable

from ..backends import JobState, State
from ..rank.printable import printable, shown
from ..rank.during.slow import describe as slow_text
from .progress import RankProgress, TrainingProgress
from .startup import line as startup_line
from .status import RunStatus

if TYPE_CHECKING:  # only their fields are read here
    from .board import Board
    from .plot import Plot

WIDTH = 80


def describe(state: JobState) -> str:
    """One phrase: 'PENDING (Resources)', 'FAILED exit 3', 'RUNNING 00:01:02 on node[1-2]'."""
    return printable(_describe(state))


def _describe(state: JobState) -> str:
    s = state.state
    if s == State.STOPPED and state.reason:  # '(SIGTERM) at iteration 25, saved ...; continue with: ...'
        return f"{s.value} {state.reason}"
    if state.why and not state.done:  # why it waits, in plain words (backends/slurm/pending.py)
        return f"{s.value}: {state.why['text']}"
    if state.reason and (s in (State.PENDING, State.REQUEUED, State.UNKNOWN, State.CANCELLED)
                         or state.reason.startswith("cannot reach")):
        return f"{s.value} ({state.reason})"
    parts = [s.value]
    if state.done and state.exit_code not in (None, 0):
        parts.append(f"exit {state.exit_code}")
    if state.restarts:
        parts.append(f"requeued {state.restarts}x")
    if state.elapsed:
        parts.append(state.elapsed)
    if state.nodes and not state.done:
        parts.append(f"on {state.nodes}")
    return " ".join(parts)


def counts_line(state: JobState) -> str:
    counts = state.counts
    return ", ".join(f"{n} {s.lower()}" for s, n in sorted(counts.items()))


def number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"  # None too for a NaN (rank/records.py)


def rate_text(rate: float | None) -> str:
    """Steps per second, or seconds per step when a step takes longer than a second."""
    if not rate:
        return "-"
    return f"{rate:.3g}/s" if rate >= 1 else f"{1 / rate:.3g} s/step"


def age_text(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds}s ago"
    if seconds < 7200:
        return f"{seconds // 60}m ago"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m ago"


def progress_phrase(p: TrainingProgress, ago: bool = True) -> str:
    """'step 120 (2.3/s), reward 70.5, 3s ago': how far, how fast, how well, how recently."""
    step = f"step {p.step}" + (f" (slowest rank {p.min_step})" if p.min_step < p.step else "")
    parts = [step + (f" ({rate_text(p.rate)})" if p.rate else "")]
    if p.metric:
        parts.append(f"{p.metric} {number(p.value)}")
    if ago:
        parts.append(age_text(p.age_s))
    if p.attempt:
        parts.append(f"attempt {p.attempt + 1}")
    return ", ".join(parts)


def brief(p: TrainingProgress, ago: bool = True) -> str:
    """The table's short form: 'step 120 reward 70.5 3s ago'."""
    parts = [f"step {p.step}"]
    if p.metric:
        parts.append(f"{p.metric} {number(p.value)}")
    if ago:
        parts.append(age_text(p.age_s))
    return " ".join(parts)


def rank_lines(ranks: list[RankProgress], ago: bool = True, indent: str = "  ") -> list[str]:
    """One line per rank: where it runs, its step, rate, when it last reported, its metrics."""
    node_w = max([4] + [len(r.node or "?") for r in ranks])
    step_w = max([4] + [len(str(r.step)) for r in ranks])
    head = f"{indent}{'rank':>4}  {'node':<{node_w}}  {'step':>{step_w}}  {'rate':<10}"
    head += f"  {'updated':<9}" if ago else ""
    lines = [head + "  metrics"]
    for r in ranks:
        line = (f"{indent}{r.rank:>4}  {(r.node or '?'):<{node_w}}  {r.step:>{step_w}}  "
                f"{rate_text(r.rate):<10}")
        line += f"  {age_text(r.age_s):<9}" if ago else ""
        metrics = " ".join(f"{k}={number(v)}" for k, v in sorted(r.metrics.items()))
        if r.attempt:
            metrics = f"(attempt {r.attempt + 1}) " + metrics
        lines.append((line + "  " + metrics).rstrip())
    return lines


def _running(state: JobState) -> bool:
    return not state.done


def evaluation_lines(rows: list[dict], problems: list[str]) -> list[str]:
    """The evaluation table of a run: one row per checkpoint (runs/evaluations.as_json)."""
    if not rows and not problems:
        return []

    def num(v, fmt="{:.4g}"):
        return "-" if v is None else fmt.format(v)
    out = [f"{'iteration':>9}  {'mean return':>11}  {'ep length':>9}  {'success':>7}  checkpoint"]
    for e in rows:
        it = "-" if e["iteration"] is None else str(e["iteration"])
        if e["status"] != "ok":
            out.append(shown(f"{it:>9}  failed: {e.get('error') or 'no result'}  {e['checkpoint']}"))
            continue
        out.append(shown(f"{it:>9}  {num(e['mean_return']):>11}  {num(e['episode_length']):>9}  "
                         f"{num(e['success_rate'], '{:.0%}'):>7}  {e['checkpoint']}"))
    scored = [e for e in rows if e["status"] == "ok" and e["mean_return"] is not None]
    if scored:
        top = max(scored, key=lambda e: (e["mean_return"], e["iteration"] or 0))
        out.append(shown(f"best by evaluation (highest mean return): {top['checkpoint']}"))
    out += [shown(f"unreadable: {p}") for p in problems]
    return out


def format_status(st: RunStatus, ranks: bool = False) -> str:
    s = st.state
    lines = [
        f"run       {st.run_id}",
        f"job name  {st.name} on {st.site}",
        f"job       {st.job}" + (f"  array of {len(s.tasks)}" if s.tasks else ""),
        f"state     {describe(s)}",
    ]
    if s.why and not s.done:
        lines.append(f"action    {s.why['action']}")
        if s.why.get("reason"):
            lines.append(f"reason    {s.why['reason']} (Slurm's word; {s.why['category']})")
    if s.tasks:
        lines.append(f"tasks     {counts_line(s)}")
    live = _running(s)
    own = [p for p in st.progress if p.task is None]
    if own:
        lines.append(f"progress  {progress_phrase(own[0], ago=live)}")
    elif live and not s.tasks and s.state == State.RUNNING:
        lines.append("progress  no report yet (the ranks report at each iteration)")
    first = startup_line(st.startup)
    if first:
        lines.append(f"startup   {first}")
    lines.append(f"shape     {st.nodes} node(s) x {st.ranks_per_node} rank(s)")
    if s.nodes:
        lines.append(f"nodes     {s.nodes}")
    if s.elapsed and not s.tasks:
        lines.append(f"elapsed   {s.elapsed}")
    for dep in st.waits_for:
        verdict = {"waiting": "", "met": " (met)",
                   "never": f" - {dep['mode']} can never be met"}.get(dep["verdict"], "")
        lines.append(f"after     {dep['mode']} run {dep['run_id']} (job {dep['job']}): "
                     f"{dep['state']}{verdict}")
    if st.submitted:
        lines.append(f"submitted {st.submitted}")
    lines.append(f"directory {st.path}")
    if st.derived_from:
        lines.append(shown(f"{st.derived_from['purpose'][:40]} of {st.derived_from['run']}"))
    table = evaluation_lines(st.evaluations, st.evaluation_problems)
    if table:
        lines += ["", "evaluation", *table]
    if s.tasks:
        by_task = {p.task: p for p in st.progress}
        job_w = max([4] + [len(t.job or str(i)) for i, t in enumerate(s.tasks)])
        lines.append("")
        lines.append(f"{'task':<{job_w}}  {'state':<24}  {'progress':<24}  values")
        for i, t in enumerate(s.tasks):
            values = " ".join(f"{k}={v}" for k, v in (st.task_values[i] if i < len(st.task_values) else {}).items())
            p = by_task.get(i)
            done = brief(p, ago=not t.done) if p else "-"
            row = f"{describe(t)[:24]:<24}  {done[:24]:<24}  {values}"
            lines.append(f"{t.job or str(i):<{job_w}}  " + row[:max(24, WIDTH - 1 - job_w - 2)])
    if st.jobs:
        lines.append(f"earlier   job(s) {', '.join(st.jobs)} (submit --resume)")
    swapped = {(r["job_id"], n) for r in st.replacements for n in r["out"]}
    for h in st.history:  # the earlier attempts that failed, then this one's state
        then = f"; requeued without {', '.join(h['without'])}" if h["without"] else ""
        if h["without"] and all((h["job_id"], n) in swapped for n in h["without"]):
            then = f"; {', '.join(h['without'])} replaced by a spare (no requeue)"
        lines.append(f"attempt {h['attempt']} {h['reason']}: {h['message'][:160]}{then}")
    if st.history:
        lines.append(f"now       {describe(s)}")
    if st.ended:
        lines.append(f"ended     {st.ended}")
    for s in st.slow:
        lines.append(f"slow      {slow_text(s)}")
    for e in st.excluded:
        lines.append(f"excluded  {e['node']}: {e['reason']}: {e['message'][:200]}")
    for r in st.replacements:
        lines.append(replacement_text(r))
    if ranks:
        for p in st.progress:
            lines.append("")
            lines.append("ranks:" if p.task is None else f"task {p.task} ranks:")
            lines.extend(rank_lines(p.ranks, ago=live))
        if not st.progress:
            lines.append("")
            lines.append("ranks:    no progress reported yet")
    if st.failures:
        lines.append("")
        lines.append("failed ranks:")
        for f in st.failures:
            where = f"task {f['task']} " if f["task"] is not None else ""
            lines.append(f"  {where}rank {f['rank']} on {f['node']} exit {f['exit_status']}: "
                         f"{f['error']}")
    return shown("\n".join(lines))


def replacement_text(r: dict) -> str:
    """'replaced   attempt 2 of job 12: node3 out, node4 in (preflight failure, excluding
    node3); training again 41 s after the failure'."""
    back = (f"training again {r['back_s']:.0f} s after the failure" if r["back_s"] is not None
            else "not training again yet")
    return (f"replaced  attempt {r['attempt'] % 100 + 1} of job {r['job_id'] or '?'}: "
            f"{', '.join(r['out']) or '?'} out, {', '.join(r['in']) or '?'} in "
            f"({r['why'][:200]}); {back}")


def _state_word(state: JobState) -> str:
    return state.state.value + (f"({state.exit_code})" if state.done and state.exit_code else "")


def table_progress(r: RunStatus) -> str:
    if not r.progress:
        return r.state.why["text"] if r.state.why and not r.state.done else "-"
    if r.state.tasks:
        steps = [p.step for p in r.progress]
        lo, hi = min(steps), max(steps)
        return f"{len(r.progress)}/{len(r.state.tasks)} tasks: step " + (f"{lo}" if lo == hi else f"{lo}-{hi}")
    return brief(r.progress[0], ago=not r.state.done)


def format_table(rows: list[RunStatus], notes: dict[str, str] | None = None) -> str:
    """A table of runs, newest first. The run id begins with the time it was submitted. Run,
    name, job and state are shown in full, each column as wide as its longest value; progress
    takes what is left of 80 columns. notes: run path -> what to show as its progress instead
    (a study's trials and best)."""
    notes = notes or {}
    cols = [("RUN", [r.run_id for r in rows]), ("NAME", [r.name for r in rows]),
            ("JOB", [r.job or "" for r in rows]), ("STATE", [_state_word(r.state) for r in rows])]
    widths = [max([len(head)] + [len(v) for v in values]) for head, values in cols]
    fixed = sum(widths) + 2 * len(widths)
    # Identifiers too long for 80 columns make the table wider anyway: progress is then whole.
    room = WIDTH - 1 - fixed if WIDTH - 1 - fixed >= 20 else None
    head = "  ".join(f"{h:<{w}}" for (h, _), w in zip(cols, widths)) + "  PROGRESS"
    lines = [head]
    for i, r in enumerate(rows):
        cells = "  ".join(f"{values[i]:<{w}}" for (_, values), w in zip(cols, widths))
        progress = notes.get(r.path) or table_progress(r)
        lines.append(f"{cells}  {progress[:room]}".rstrip())
    return shown("\n".join(lines))


class WaitPrinter:
    """What `submit --wait` prints while it follows a run.

    On a terminal: one line, redrawn in place every tick (the state, the newest progress and
    how long ago it came; with ranks, each rank's step). In a log file or a pipe: a line per
    change of state, and a progress line when progress first appears and then at most every
    `every` seconds (a job of hours is a few hundred lines, not one per second).
    """

    def __init__(self, live: bool, write: Callable[[str], None], ranks: bool = False,
                 columns: int = WIDTH, every: float = 30.0):
        self.live, self.write, self.ranks = live, write, ranks
        self.columns, self.every = columns, every
        self.last_state = None
        self.last_step = None
        self.printed_at = None

    def line(self, st: RunStatus) -> str:
        text = f"{st.job}: {describe(st.state)}"
        if st.state.tasks:
            text += f" [{counts_line(st.state)}]"
        if not st.progress:
            return text
        if st.state.tasks:
            return text + "  " + "; ".join(f"task {p.task} {brief(p, ago=False)}" for p in st.progress)
        p = st.progress[0]
        text += "  " + progress_phrase(p, ago=not st.state.done)
        if self.ranks and self.live:
            text += "  ranks " + " ".join(f"{r.rank}:{r.step}" for r in p.ranks)
        return text

    def __call__(self, st: RunStatus) -> None:
        if self.live:
            self.write("\r\033[K" + printable(self.line(st))[:self.columns - 1])
            return
        state = (st.state.state, counts_line(st.state))
        step = tuple((p.task, p.attempt, p.step) for p in st.progress)
        now = time.monotonic()
        changed = state != self.last_state
        due = step and step != self.last_step and (
            self.last_step is None or not self.printed_at or now - self.printed_at >= self.every)
        if not (changed or due):
            return
        self.last_state = state
        if st.progress:
            self.last_step, self.printed_at = step, now
        self.write(printable(self.line(st)) + "\n")
        if self.ranks:
            for p in st.progress:
                task = "" if p.task is None else f"task {p.task} "
                for r in p.ranks:
                    metrics = " ".join(f"{k}={number(v)}" for k, v in sorted(r.metrics.items()))
                    self.write(printable(f"  {task}rank {r.rank} on {r.node or '?'}: step {r.step} "
                                         f"({rate_text(r.rate)}) {metrics}".rstrip()) + "\n")

    def close(self) -> None:
        if self.live:
            self.write("\n")


def plot_summary(drawn: "Plot") -> str:
    """What `hpctrain plot` drew: per curve its points, steps and attempts; then the PNG's path."""
    lines = []
    for c in drawn.curves:
        who = "" if c.task is None else f" task {c.task}:"
        span = f"steps {c.steps[0]}-{c.steps[-1]}" if c.steps else "no points"
        lines.append(f"{c.tag}{who} {len(c.steps)} points, {span}, {c.attempts} attempt(s) "
                     f"starting at step {', '.join(map(str, c.attempt_starts))}")
    if drawn.left_out:
        lines.append(f"({drawn.left_out} more metric(s) not drawn: choose with --metric)")
    if drawn.evaluated:
        its = [i for i, _ in drawn.evaluated]
        best = max(drawn.evaluated, key=lambda p: (p[1], p[0]))
        lines.append(f"evaluation: {len(its)} checkpoint(s), iterations {its[0]}-{its[-1]}, "
                     f"best mean return {best[1]:.4g} at iteration {best[0]}")
    if drawn.note:
        lines.append(drawn.note)
    lines.append(drawn.path)
    return shown("\n".join(lines))


def board_text(board: "Board", run_id: str) -> str:
    """Where TensorBoard serves a run, what it found, and the way in from a laptop."""
    lines = [f"TensorBoard {board.url} serving run {run_id}: {board.logdir}"]
    lines += [f"  {d}" for d in board.directories] or [
        "  (no event files yet: they appear here as the training writes them)"]
    lines += ["From your laptop, forward the port to this machine:", f"  {board.forward}",
              f"then open http://localhost:{board.port}/   (Ctrl-C here stops TensorBoard)"]
    return shown("\n".join(lines))


def remote_lines(rec) -> list[str]:
    """What `submit` says of a run submitted through a login node: where it lives there and
    how much code was copied."""
    far = rec.extra.get("remote")
    if not far:
        return []
    code = far.get("code") or {}
    return [shown(line) for line in [f"cluster: {far['login']}:{far['path']}",
            f"code: {code.get('files', 0)} files, {code.get('bytes', 0) / 1048576:.2f} MiB copied "
            f"from {code.get('from', '?')} (later edits here do not reach this run)"]]
