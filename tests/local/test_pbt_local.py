"""Population-based training on the local site (issue 42): four members of a program whose best
learning-rate schedule is known (tests/programs/known_schedule.py: high early, low late) train at
once; the bottom member copies a top member's checkpoint and continues from it with a perturbed
lr, really (the program resumes from the copied step with the new value), and the population's
best ends above every one of its starting values kept fixed all along. In the same run: member 1
crashes once and restarts from its own checkpoint with its values; the population is cancelled
mid-run and `submit --resume` continues every member from its checkpoint with its values. Real
processes, torchrun."""
from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import yaml

from tests.conftest import ROOT, submitted
from tests.programs.known_schedule import fixed

STEPS = 40
JOB = {
    "name": "pbt", "script": str(ROOT / "tests/programs/known_schedule.py"),
    "python": sys.executable,
    "args": ["--lr=0.001", f"--steps={STEPS}", "--step-time=0.5", "--crash-once-in=0001",
             "--crash-at=2"],
    "search": {"method": "pbt", "params": {"lr": {"low": 1e-5, "high": 1e-1, "log": True}},
               "parallel": 4, "seed": 59,
               "pbt": {"interval": 4, "steps": STEPS, "fraction": 0.5, "factors": [0.1, 10]}},
}


def _lineage(run_dir):
    return {i: [json.loads(line) for line in
                (run_dir / "population" / f"member-{i}.jsonl").read_text().splitlines()]
            for i in range(4)}


def _resumed(run_dir, i):
    path = run_dir / "trials" / f"{i:04d}" / "status" / "resumed.txt"
    if not path.exists():
        return []
    return [(int(a), float(b)) for a, b in (line.split() for line in path.read_text().splitlines())]


def explored_from(lineage, copy) -> list[float]:
    """The lr values a copy may have explored from: those of its parent's records of the copied
    interval (the parent may have written another one, a copy of its own, in the meantime),
    and for a record that is itself a copy (its values not tried yet), those it copied."""
    out, todo, seen = [], [(copy["parent"], copy["parent_interval"])], set()
    while todo:
        m, interval = todo.pop()
        if (m, interval) in seen:
            continue
        seen.add((m, interval))
        for p in lineage[m]:
            if p.get("interval", 0) == interval and p["event"] in ("ready", "end", "exploit"):
                out.append(p["params"]["lr"])
                if p["event"] == "exploit":
                    todo.append((p["parent"], p["parent_interval"]))
    return out


def _wait(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_population_copies_perturbs_and_beats_its_fixed_values(cli, tmp_path):
    path = tmp_path / "pop.yaml"
    path.write_text(yaml.safe_dump(JOB))
    _, run_dir = submitted(cli("submit", path, "--site", "local").stdout)

    # Cancelled once every member has recorded step 12: each member's ranks end (its newest
    # checkpoint stays), and its values stay its newest record's.
    def at_12():
        try:
            return all(any((r.get("step") or 0) >= 12 for r in recs)
                       for recs in _lineage(run_dir).values())
        except (OSError, ValueError):
            return False
    _wait(at_12, 180, "every member at step 12")
    cli("cancel", run_dir.name)
    _wait(lambda: (run_dir / "status" / "exit_code").exists(), 60, "the population's end")
    before = _lineage(run_dir)
    assert not any(recs[-1]["event"] == "end" for recs in before.values()), before
    launched = {i: len(_resumed(run_dir, i)) for i in range(4)}
    cli("submit", "--resume", run_dir.name, "--wait", timeout=300)
    lineage = _lineage(run_dir)

    starts = [recs[0]["params"]["lr"] for recs in lineage.values()]
    assert [recs[0]["event"] for recs in lineage.values()] == ["start"] * 4
    assert all(recs[-1]["event"] == "end" for recs in lineage.values()), lineage

    # The resume: each member's first record after the cancel continues with its values, and
    # its program's next start resumed from a checkpoint (not step 1) with them.
    for i, recs in lineage.items():
        again = recs[len(before[i])]
        assert again["event"] == "restart" and again["params"] == before[i][-1]["params"], again
        step, lr = _resumed(run_dir, i)[launched[i]]
        assert step > 1 and lr == again["params"]["lr"], (_resumed(run_dir, i), again)

    # Member 1's crash, in its first launch (at step 2, before any member decides, so that no
    # copy stops it first): it restarted from its own newest checkpoint (the step it crashed at
    # is the first it trains again) with the values it had.
    crashed_at = int((run_dir / "trials" / "0001" / "status" / "crashed-at").read_text())
    crash = [r for r in lineage[1] if r["event"] == "restart" and "after a crash" in r["note"]]
    assert len(crash) == 1, lineage[1]
    assert (crashed_at, crash[0]["params"]["lr"]) in _resumed(run_dir, 1), _resumed(run_dir, 1)

    # A member is judged again only past the interval it copied, once its new values trained,
    for recs in lineage.values():
        for r, after in zip(recs, recs[1:]):
            if r["event"] == "exploit" and after["event"] == "ready":
                assert after["interval"] > r["interval"], (r, after)
        # and copies nobody once its training is done
        done = [k for k, r in enumerate(recs) if r["event"] == "ready" and r["step"] >= STEPS]
        assert not done or all(r["event"] != "exploit" for r in recs[done[0]:]), recs

    # Copies happened: each took its parent's recorded values times 0.1 or 10 (kept in the
    # space), and the member's program resumed from the copied step with that new lr.
    copies = [(i, r) for i, recs in lineage.items() for r in recs if r["event"] == "exploit"]
    assert copies, lineage
    for i, r in copies:
        parents = explored_from(lineage, r)
        # (or, with resample_probability, a fresh draw from the space, as its record says)
        assert any(math.isclose(r["params"]["lr"], min(max(lr * f, 1e-5), 1e-1))
                   for lr in parents for f in (0.1, 10)) or (
            r.get("resampled") == ["lr"] and 1e-5 <= r["params"]["lr"] <= 1e-1), (r, parents)
        assert any(lr == r["params"]["lr"] for _, lr in _resumed(run_dir, i)), r

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
    # list, report and the Python handle read it as a population, not an empty Optuna study.
    listed = cli("list").stdout
    assert f"best {best['score']:.4g} member {best['member']}" in listed, listed
    row = [d for d in json.loads(cli("list", "--json").stdout) if d["run_id"] == run_dir.name]
    assert row[0]["population"]["best"]["member"] == best["member"], row
    report = cli("report", run_dir.name).stdout
    assert report.count(" GPU-h ") == 4 and "member    1 ended" in report, report
    import hpctrain
    found = hpctrain.Study(run_dir.name).best()
    assert (found.member, found.score, found.checkpoint) == (
        best["member"], best["score"], best["checkpoint"]) and found.schedule
    # `pull POPULATION --best`: the best member's folder and its checkpoint, with a manifest.
    got = tmp_path / "best"
    out = cli("pull", run_dir.name, "--best", "--to", got).stdout
    assert f"best: member {best['member']}," in out, out
    rel = Path(best["checkpoint"]).relative_to(run_dir)
    assert (got / rel).read_bytes() == Path(best["checkpoint"]).read_bytes()
    member = f"trials/{best['member']:04d}/"
    pulled = [f["path"] for f in json.loads((got / "hpctrain-pull.json").read_text())["files"]]
    assert str(rel) in pulled and all(p.startswith(member) or p == str(rel) for p in pulled), pulled
    assert any(p.startswith(member + "logs/") for p in pulled), pulled


# ----------------------------------------------------------------------------- a moving optimum

DROP = 100  # the best lr drops two decades halfway: 3e-2, then 3e-4
MOVING = {
    "name": "pbt-moving", "script": str(ROOT / "tests/programs/known_schedule.py"),
    "python": sys.executable,
    "args": ["--lr=0.001", f"--steps={STEPS}", "--step-time=0.3", f"--drop={DROP}"],
    # Perturbation as by default (x0.8 / x1.2: two decades are ~20 copies away), and a fresh draw
    # half the time: with the default quarter, 4 members beat every fixed start on about half of
    # this landscape's seeds, with a half on 7 in 10 (the members' rules simulated over 300 seeds
    # x 20 timings, issue 51), and with seed 59 in each of 60 simulated timings (restarts of 1 to
    # 7 s). Seed 59 starts one member near each half's best: the best start is within 0.3 of the
    # best fixed lr of all.
    "search": {"method": "pbt", "params": {"lr": {"low": 1e-4, "high": 1e-1, "log": True}},
               "parallel": 4, "seed": 59,
               "pbt": {"interval": 4, "steps": STEPS, "fraction": 0.5,
                       "resample_probability": 0.5}},
}


def test_a_population_follows_a_best_value_that_drops_100x_halfway(cli, tmp_path):
    """A held-out-style landscape (issue 51, item 5): the population's best beats every value
    it started from kept fixed all along (a plain computation of the landscape), each member is
    judged at each of its intervals (a copy, or a record of why not), and `status` says why."""
    path = tmp_path / "moving.yaml"
    path.write_text(yaml.safe_dump(MOVING))
    _, run_dir = submitted(cli("submit", path, "--site", "local", "--wait", timeout=150).stdout)
    lineage = _lineage(run_dir)
    story = "\n".join(f"member {m}: " + " ".join(
        f"{r['event']}@{r.get('step')}:{r['params']['lr']:.1e}:{r.get('score') or 0:.1f}"
        + (f"<{r['parent']}" if r.get("parent") is not None else "")
        + ("R" if r.get("resampled") else "") for r in recs) for m, recs in lineage.items())
    assert all(recs[-1]["event"] == "end" for recs in lineage.values()), story

    # Judged at every interval it recorded before its last: a copy, or why it kept on.
    for recs in lineage.values():
        for r, after in zip(recs, recs[1:]):
            if r["event"] == "ready" and r["step"] < STEPS:
                assert after["event"] in ("exploit", "kept"), (r, after, story)
                assert after["event"] == "exploit" or after["why"], after

    starts = [recs[0]["params"]["lr"] for recs in lineage.values()]
    kept_fixed = max(fixed(lr, STEPS, DROP) for lr in starts)
    st = json.loads(cli("status", run_dir.name, "--json").stdout)["population"]
    assert st["best"]["score"] > kept_fixed + 1.0, (st["best"]["score"], kept_fixed, story)
    # It got there by a fresh draw: no copy of x0.8 / x1.2 crosses two decades.
    assert any(r.get("resampled") == ["lr"] for recs in lineage.values() for r in recs
               if r["event"] == "exploit"), story
    text = cli("status", run_dir.name).stdout
    assert "newest decision" in text and ("no copy, " in text or "copied member" in text), text
