"""Render time against nodes and against sweep size, and launch time against nodes, from
bench/run's JSON (matplotlib; runs in the peers' venv).   python bench/plot.py RESULTS.json OUT.png"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

data = json.load(open(sys.argv[1]))
rows = data["rows"]
style = {"hpctrain": ("tab:blue", "o"), "floor": ("0.4", "s"), "torchx": ("tab:red", "^"),
         "submitit": ("tab:green", "D"), "hand-written": ("0.4", "s")}


def who(name):
    return next((k for k in style if name.startswith(k)), None)


panels = [("render", "nodes (× 4 GPUs)", lambda r: int(r["row"].split()[1])),
          ("sweep", "variants in the sweep", lambda r: int(r["row"].split()[2]))]
if any(r["group"] == "scale" for r in rows):
    panels.append(("scale", "nodes (1 rank each)", lambda r: int(r["row"].split()[2].split("×")[0])))
fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4.3))
for ax, (group, xlabel, xof) in zip(axes, panels):
    series = {}
    for r in rows:
        if r["group"] == group and who(r["who"]):
            series.setdefault(r["who"], []).append((xof(r), r["median"], r["min"], r["max"]))
    for name, pts in series.items():
        pts.sort()
        color, marker = style[who(name)]
        xs = [p[0] for p in pts]
        ax.plot(xs, [p[1] for p in pts], marker=marker, color=color, label=name)
        ax.fill_between(xs, [p[2] for p in pts], [p[3] for p in pts], color=color, alpha=0.12)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("seconds, whole process (median; band: min–max)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
axes[0].set_title("one job script, 2 → 4096 nodes")
axes[1].set_title("a sweep of N variants (hpctrain/submitit: one array job)")
if len(panels) > 2:
    axes[2].set_title("launch on the local cluster: RUNNING → all ranks ready")
    axes[2].set_yscale("linear")
fig.suptitle("hpctrain vs TorchX, submitit, the Jinja2+PyYAML floor and a hand-written script",
             fontsize=11)
fig.text(0.01, 0.01, data["machine"][:160], fontsize=6, color="0.4")
fig.tight_layout(rect=(0, 0.03, 1, 0.95))
fig.savefig(sys.argv[2], dpi=110)
print(f"wrote {sys.argv[2]}")
