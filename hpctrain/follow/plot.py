"""`hpctrain plot RUN`: a PNG of the run's scalar curves, one panel per metric, one curve per
sweep task, stitched across restarts and requeues (follow/curves.py), each attempt's start marked.

matplotlib (the `watch` extra) is imported only here, through its object API (no pyplot, no
display needed), and only when a plot is drawn.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

from .curves import Curve, choose, read_run
from ..errors import HpctrainError
from ..runs.records import Run


@dataclass
class Plot:
    path: str
    curves: list[Curve]
    shown: list[str]  # the metrics drawn, in panel order
    left_out: int  # metrics there was no panel for (choose them with --metric)
    evaluated: list[tuple[int, float]] | None = None  # plot --eval: (iteration, mean return)
    note: str | None = None


def main_scalars(library: str) -> tuple[str, ...]:
    from ..libraries import adapter
    try:
        return adapter(library).main_scalars
    except KeyError:
        return ()


def _ordered(tags: list[str], main: tuple[str, ...]) -> tuple[str, ...]:
    """The library's main metrics, then anything named like a reward or return."""
    rewardish = tuple(t for t in tags if "reward" in t.lower() or "return" in t.lower())
    return main + tuple(t for t in rewardish if t not in main)


def run_curves(run: Run, metrics: list[str], limit: int = 12) -> tuple[list[Curve], list[str], int]:
    """The stitched curves to draw (every task's, for each chosen metric), the metrics in
    panel order, and how many metrics were left out by the limit."""
    rec = run.record
    scalars = read_run(str(run.path), rec.array_size)
    if not scalars:
        where = "its tasks' directories" if rec.array_size else "it"
        raise HpctrainError(f"run {run.id} has no TensorBoard event files yet (looked in {run.path}"
                            f" and every folder under {where})",
                            fix="the libraries write them as they train (rank 0, every few "
                            "iterations); a program of your own: write them under "
                            "$HPCTRAIN_RUN_DIR (torch.utils.tensorboard.SummaryWriter)")
    tags = sorted({t for s in scalars for t in s.tags})
    shown = choose(tags, metrics, _ordered(tags, main_scalars(rec.library)), limit=limit)
    left_out = 0 if metrics else max(0, len(tags) - len(shown))
    curves = [s.curve(tag) for tag in shown for s in scalars if tag in s.tags]
    return curves, shown, left_out


def attempt_labels(attempts: int, startup: list[dict]) -> list[str]:
    """The label of each attempt's line: its number, and how long after its start its first
    step came (follow/startup.py: the attempts that reached one, in order)."""
    firsts = [a["first_step_s"] for a in startup if a.get("first_step_s") is not None]
    return [f"attempt {i + 1}" + (f", first step after {firsts[i]:.0f} s"
                                  if i < len(firsts) and len(firsts) == attempts else "")
            for i in range(attempts)]


def draw(curves: list[Curve], shown: list[str], path: str, title: str, fmt: str = "png",
         startup: list[dict] | None = None, root: str | None = None) -> None:
    """One panel per metric; a curve per task; dotted lines where attempts began, each with the
    seconds its first step took."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    cols = 1 if len(shown) == 1 else 2
    rows = math.ceil(len(shown) / cols)
    fig = Figure(figsize=(6.4 * cols, 3.4 * rows + 0.4), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    tasks = sorted({c.task for c in curves}, key=lambda t: -1 if t is None else t)
    colors = {t: f"C{i % 10}" for i, t in enumerate(tasks)}
    for ax, tag in zip(axes, shown):
        for curve in (c for c in curves if c.tag == tag):
            label = "run" if curve.task is None else f"task {curve.task}"
            ax.plot(curve.steps, curve.values, color=colors[curve.task], linewidth=1.4,
                    label=label if len(tasks) > 1 else None)
            labels = attempt_labels(curve.attempts, startup if curve.task is None else [])
            if curve.attempts > 1 or (labels and labels[0] != "attempt 1"):
                for label, start in zip(labels, curve.attempt_starts):
                    ax.axvline(start, color=colors[curve.task], linestyle=":", linewidth=1)
                    ax.annotate(label, (start, 1), xycoords=("data", "axes fraction"),
                                xytext=(2, -2), textcoords="offset points", va="top",
                                fontsize=7, color=colors[curve.task])
        ax.set_title(tag, fontsize=10)
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        if len(tasks) > 1:
            ax.legend(fontsize=7)
    for ax in axes[len(shown):]:
        ax.set_visible(False)
    fig.suptitle(title, fontsize=11)
    save(fig, path, fmt, root)


def _formats() -> list[str]:
    """The file formats matplotlib writes (its canvas's own list: png, pdf, svg, eps, jpg, ...)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
    except ImportError:
        raise HpctrainError("writing a figure needs matplotlib",
                            fix="pip install 'hpctrain[watch]' (tensorboard and matplotlib)") from None
    return sorted(FigureCanvasAgg.get_supported_filetypes())


def figure_path(out: str | None, run_path, name: str) -> tuple[str, str, str | None]:
    """Where a figure goes, in which format, and under which run directory (None: a path the
    user gave), one rule for `plot` and `report`: no --out, RUN_DIR/plots/NAME as PNG, written
    the run directory's way (runs/untrusted.writing); a directory, NAME inside it; a file name,
    the format its extension names where matplotlib writes it (none: a PNG of exactly that
    name); any other extension is refused with the formats there are."""
    if out is None:
        root = os.path.abspath(run_path)
        return os.path.join(root, "plots", name), "png", root
    path = os.path.abspath(out)
    if os.path.isdir(path):
        path = os.path.join(path, name)
    ext = os.path.splitext(path)[1].lower().lstrip(".")
    formats = _formats()
    if ext and ext not in formats:
        raise HpctrainError(f"--out {out}: matplotlib cannot write a .{ext} file",
                            fix="end the name in one of " + ", ".join(f".{f}" for f in formats)
                            + " (or give a directory)")
    return path, ext or "png", None


def save(fig, path: str, fmt: str, root: str | None) -> None:
    """The figure into `path` in `fmt` (matplotlib adds no extension when told the format),
    through the one writer of run directories: never through a link, a pipe or a device."""
    from ..runs.untrusted import writing
    if root is None:  # a path the user gave: its folders are made as asked
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
        except OSError as exc:
            raise HpctrainError(f"cannot create {os.path.dirname(path)}: {exc.strerror}",
                                fix="give a writable --out PATH") from None
    with writing(path, root) as f:
        try:
            fig.savefig(f, dpi=100, format=fmt)
        except (RuntimeError, ValueError) as exc:  # a writer this machine lacks (pgf: LaTeX)
            raise HpctrainError(f"cannot write {path} as .{fmt}: {str(exc)[:300]}",
                                fix="choose another extension (.png, .pdf, .svg)") from None


EVAL_PANELS = (("mean_return", "evaluation: mean return"),
               ("episode_length", "evaluation: episode length"),
               ("success_rate", "evaluation: success rate"))


def draw_evaluation(curves: list[Curve], shown: list[str], evals: list, path: str, title: str,
                    fmt: str, root: str | None) -> None:
    """The training curve (its main metric, every task) beside the evaluation against
    iteration: mean return, and episode length and success rate where they were measured."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    panels = [(key, name) for key, name in EVAL_PANELS
              if any(getattr(e, key) is not None for e in evals)]
    n = len(shown) + len(panels)
    fig = Figure(figsize=(5.2 * n, 3.6), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, n, squeeze=False).ravel()
    for ax, tag in zip(axes, shown):
        for curve in (c for c in curves if c.tag == tag):
            ax.plot(curve.steps, curve.values, linewidth=1.4)
        ax.set_title(f"training: {tag}", fontsize=10)
        ax.set_xlabel("iteration")
        ax.grid(alpha=0.3)
    top = max(evals, key=lambda e: (e.mean_return, e.iteration))
    for ax, (key, name) in zip(axes[len(shown):], panels):
        points = [(e.iteration, getattr(e, key)) for e in evals if getattr(e, key) is not None]
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", linewidth=1.4)
        if key == "mean_return":
            ax.plot([top.iteration], [top.mean_return], marker="*", markersize=14,
                    linestyle="none", label=f"best: {os.path.basename(top.checkpoint)}")
            ax.legend(fontsize=7)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("iteration (checkpoint)")
        ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=11)
    save(fig, path, fmt, root)


def plot_evaluation(run: Run, metrics: list[str] | None = None, out: str | None = None) -> Plot:
    """`plot RUN --eval` (default RUN_DIR/plots/evaluation.png)."""
    from ..runs.evaluations import read
    path, fmt, root = figure_path(out, run.path, "evaluation.png")
    found, _ = read(run.path)
    evals = [e for e in found if e.status == "ok" and e.mean_return is not None
             and e.iteration is not None]
    if not evals:
        raise HpctrainError(f"run {run.id} has no evaluation with a mean return to draw",
                            fix=f"hpctrain eval {run.id} --checkpoint all --wait")
    note = None
    try:
        curves, shown, _ = run_curves(run, list(metrics or []), limit=1)
    except HpctrainError as exc:
        curves, shown, note = [], [], f"no training curve: {exc.what}"
    rec = run.record
    draw_evaluation(curves, shown, evals, path, f"{rec.name}  ({run.id}, {rec.library})", fmt,
                    root)
    return Plot(path=path, curves=curves, shown=shown, left_out=0,
                evaluated=[(e.iteration, e.mean_return) for e in evals], note=note)


def plot(run: Run, metrics: list[str] | None = None, out: str | None = None) -> Plot:
    """Draw the run's curves into `out` (default RUN_DIR/plots/curves.png)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise HpctrainError("plotting needs matplotlib",
                            fix="pip install 'hpctrain[watch]' (tensorboard and matplotlib)") from None
    path, fmt, root = figure_path(out, run.path, "curves.png")
    curves, shown, left_out = run_curves(run, list(metrics or []))
    rec = run.record
    from .startup import attempts
    draw(curves, shown, path, f"{rec.name}  ({run.id}, {rec.library})", fmt,
         attempts(str(run.path)), root)
    return Plot(path=path, curves=curves, shown=shown, left_out=left_out)
