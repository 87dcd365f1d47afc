"""Population-based training on the local site (issue 42): four members of a program whose best
learning-rate schedule is known (tests/programs/known_schedule.py: high early, low late) train at
once; the bottom member copies a top member's checkpoint and continues from it with a perturbed
lr, really (the program resumes from the copied step with the new value), and the population's
best ends above every one of its starting values kept fixed all along. Real processes, torchrun."""
from __future__ import annotations

import json
import math
import sys

import yaml

from tests.conftest import ROOT, submitted
from tests.programs.known_schedule import fixed

STEPS = 40
JOB = {
    "name": "pbt", "script": str(ROOT / "tests/programs/known_schedule.py"),
    "python": sys.executable,
    "args": ["--lr=0.001", f"--steps={STEPS}", "--step-time=0.5"],
    "search": {"method": "pbt", "params": {"lr": {"low": 1e-5, "high": 1e-1, "log": True}},
               "parallel": 4, "seed": 3,
               "pbt": {"interval": 4, "steps": STEPS, "fraction": 0.5, "factors": [0.1, 10]}},
}


def test_a_population_copies_perturbs_and_beats_its_fixed_values(cli, tmp_path):
    path = tmp_path / "pop.yaml"
    path.write_text(yaml.safe_dump(JOB))
    _, run_dir = submitted(cli("submit", path, "--site", "local", "--wait", timeout=300).stdout)
    lineage = {i: [json.loads(line) for line in
                   (run_dir / "population" / f"member-{i}.jsonl").read_text().splitlines()]
               for i in range(4)}
    starts = [recs[0]["params"]["lr"] for recs in lineage.values()]
    assert [recs[0]["event"] for recs in lineage.values()] == ["start"] * 4
    assert all(recs[-1]["event"] == "end" for recs in lineage.values()), lineage

    # Copies happened: each took its parent's recorded values times 0.1 or 10 (kept in the
    # space), and the member's program resumed from the copied step with that new lr.
    copies = [(i, r) for i, recs in lineage.items() for r in recs if r["event"] == "exploit"]
    assert copies, lineage
    for i, r in copies:
        parent = [p for p in lineage[r["parent"]] if p.get("interval", 0) == r["parent_interval"]
                  and p["event"] in ("ready", "end", "exploit") and p["time"] <= r["time"]][-1]
        ratio = r["params"]["lr"] / parent["params"]["lr"]
        assert any(math.isclose(ratio, f) for f in (0.1, 10)) or r["params"]["lr"] in (1e-5, 1e-1), r
    resumed = {i: (run_dir / "trials" / f"{i:04d}" / "status" / "resumed.txt")
               for i, _ in copies}
    for i, r in copies:
        lines = [line.split() for line in resumed[i].read_text().splitlines()]
        assert any(float(lr) == r["params"]["lr"] for _, lr in lines), (lines, r)

    # The population's best beats every value it started from, kept fixed all along.
    st = json.loads(cli("status", run_dir.name, "--json").stdout)["population"]
    best = st["best"]
    assert best["score"] > max(fixed(lr, STEPS) for lr in starts) + 0.1, (best, starts, [
        [(r["event"], r.get("step"), round(r.get("score") or 0, 1), r["params"]["lr"], r.get("parent"))
         for r in recs] for recs in lineage.values()])
    assert best["score"] == max(recs[-1]["score"] for recs in lineage.values())
    # Its final checkpoint is in the workspace, and its schedule is there to take.
    saved = json.loads(open(best["checkpoint"]).read())
    assert saved["step"] == STEPS and math.isclose(saved["quality"], best["score"])
    assert st["schedule"] and st["schedule"][-1]["params"]["lr"] == best["params"]["lr"]
    text = cli("status", run_dir.name).stdout
    assert f"best: member {best['member']}" in text and "schedule:" in text, text
    assert cli("plot", run_dir.name).stdout.strip().endswith("population.png")
