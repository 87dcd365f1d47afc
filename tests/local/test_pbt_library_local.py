"""A real library as a population on the local site (issue 42, item 6): examples/rl/
rsl_rl_pendulum_pbt.yaml, two members of rsl_rl's PPO on Pendulum-v1 tuning the entropy
coefficient (a value PPO takes from its configuration at every start, unlike the learning rate
runner.load() restores). The worse member copies the better one's checkpoint: rsl_rl's own
runner.load() takes that file, its iteration goes on from the copied one, and PPO trains with
the explored coefficient. Real torchrun, real rsl_rl, CPU."""
from __future__ import annotations

import json
import math
import re
import sys

from tests.conftest import ROOT, submitted


def test_rsl_rl_members_copy_and_resume_from_the_copied_checkpoint(cli, tmp_path):
    proc = cli("submit", ROOT / "examples/rl/rsl_rl_pendulum_pbt.yaml", "--site", "local",
               "--set", f"python={sys.executable}", "--wait", cwd=ROOT, timeout=300)
    _, run_dir = submitted(proc.stdout)
    lineage = {i: [json.loads(line) for line in
                   (run_dir / "population" / f"member-{i}.jsonl").read_text().splitlines()]
               for i in range(2)}
    assert all(recs[-1]["event"] == "end" for recs in lineage.values()), lineage
    copies = [(i, r) for i, recs in lineage.items() for r in recs if r["event"] == "exploit"]
    assert copies, lineage
    for i, r in copies:
        parent = [p for p in lineage[r["parent"]] if p["time"] <= r["time"]][-1]["params"][
            "entropy-coef"]
        assert any(math.isclose(r["params"]["entropy-coef"], min(max(parent * f, 1e-4), 0.1))
                   for f in (0.5, 2)), r  # kept in the space
        attempts = [json.loads(line) for line in (run_dir / "trials" / f"{i:04d}" / "results" /
                                                   "attempts.jsonl").read_text().splitlines()]
        # rsl_rl loaded the copied file (placed where the member's own lie) and went on from its
        # iteration, with the explored entropy coefficient in its PPO.
        iteration = int(re.fullmatch(r"checkpoints/model_(\d+)\.pt", r["checkpoint"]).group(1))
        path = str(run_dir / "trials" / f"{i:04d}" / r["checkpoint"])
        took = [a for a in attempts if a["resume_from"] == path and a["started_from"] == iteration
                and a["entropy_coef"] == r["params"]["entropy-coef"]]
        assert took and took[0]["reached"] >= iteration, (r, attempts)
    # At least one copy trained on from the copied iteration (not one copied at the very end).
    assert any(a["resume_from"] and a["reached"] > a["started_from"]
               for i in range(2) for a in map(json.loads, (run_dir / "trials" / f"{i:04d}" /
                                                          "results" / "attempts.jsonl")
                                              .read_text().splitlines())), copies
    st = json.loads(cli("status", run_dir.name, "--json").stdout)["population"]
    assert st["best"] is not None and st["copies"] == len(copies)
