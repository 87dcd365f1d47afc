"""`hpctrain plot STUDY`: one figure with every trial's curve (the values its ranks reported to
the pruner, by training step: a pruned trial's curve stops where it was stopped) and the study's
best value so far, trial after trial. Written through the one figure rule of follow/plot.py
(figure_path and save: RUN_DIR/plots/study.png by default, never through a link or a pipe).
"""
from __future__ import annotations

from ..errors import HpctrainError
from ..runs.records import Run
from .follow import MAX_STEP, count, finite, read
from .rules import better

COLORS = {"COMPLETE": "C0", "PRUNED": "0.6", "FAIL": "C3", "RUNNING": "C2", "WAITING": "C1"}
MAX_POINTS = 20_000  # points drawn per trial: a forged journal cannot stall the drawing


def _t(text: str) -> str:
    """Text matplotlib draws as it is: a '$' would start its math mode (and a forged metric
    name could make the drawing fail)."""
    return text.replace("$", r"\$")


def curves(trials) -> dict[int, list[tuple[int, float]]]:
    """number -> its checked (step, value) points, in step order."""
    out = {}
    for t in trials:
        number = count(t.number)
        if number is None:
            continue
        points = sorted((s, finite(v)) for s, v in t.intermediate_values.items()
                        if count(s, MAX_STEP) is not None)
        out[number] = [(s, v) for s, v in points if v is not None][-MAX_POINTS:]
    return out


def history(rows, direction: str) -> list[tuple[int, float]]:
    """(trial number, the best value of the completed trials up to it), in the order the trials
    ended (their number where no end is known)."""
    done = [r for r in rows if r.state == "COMPLETE" and r.value is not None]
    done.sort(key=lambda r: (r.ended if r.ended is not None else float("inf"), r.number))
    out, best = [], None
    for r in done:
        if best is None or better(r.value, best, direction):
            best = r.value
        out.append((r.number, best))
    return out


def plot(run: Run, out: str | None = None) -> str:
    """Draw the study into `out` (default RUN_DIR/plots/study.png); returns the path."""
    from ..follow.plot import figure_path, save
    path, fmt, root = figure_path(out, run.path, "study.png")
    st, trials = read(run)
    lines = curves(trials)
    if not any(lines.values()) and st.best is None:
        raise HpctrainError(f"study {run.id} has nothing to draw yet: no trial has reported a value",
                            fix="the workers report the ranks' metric as trials train; try again "
                            "once one has")
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator
    except ImportError:
        raise HpctrainError("plotting needs matplotlib",
                            fix="pip install 'hpctrain[watch]' (tensorboard and matplotlib)") from None
    fig = Figure(figsize=(12.8, 4.2), layout="constrained")
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    best = st.best.number if st.best is not None else None
    seen = set()
    for r in st.trials:
        points = lines.get(r.number) or []
        if not points:
            continue
        label = r.state.lower() if r.state not in seen else None
        seen.add(r.state)
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        left.plot(xs, ys, color=COLORS.get(r.state, "C1"), linewidth=2.2 if r.number == best else 1,
                  alpha=1 if r.number == best else 0.75, label=label,
                  marker="o" if len(xs) == 1 else None, markersize=3)  # one report: a dot
        if r.state == "PRUNED":
            left.plot(xs[-1:], ys[-1:], marker="x", color=COLORS["PRUNED"])
    if best is not None and lines.get(best):
        s, v = lines[best][-1]
        left.annotate(f"best #{best}", (s, v), xytext=(4, 4), textcoords="offset points", fontsize=8)
    left.set_title(_t(f"every trial: {st.metric or 'metric'} by step"), fontsize=10)
    left.set_xlabel("step")
    left.grid(alpha=0.3)
    if seen:
        left.legend(fontsize=7)
    steps = history(st.trials, st.direction)
    if steps:
        right.step(range(1, len(steps) + 1), [v for _, v in steps], where="post", color="C0")
        right.plot(range(1, len(steps) + 1), [v for _, v in steps], "o", color="C0", markersize=3)
    right.set_title(f"best so far ({st.direction})", fontsize=10)
    right.set_xlabel("completed trials")
    right.xaxis.set_major_locator(MaxNLocator(integer=True))
    right.grid(alpha=0.3)
    fig.suptitle(_t(f"{st.name}  ({st.run_id})"), fontsize=11)
    save(fig, path, fmt, root)
    return path
