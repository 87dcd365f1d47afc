#!/usr/bin/env python3
"""A study run three ways on the same cluster (issue 41 item 7): hpctrain's workers (`search:`);
`hydra`, what users run: Hydra's Optuna sweeper with its submitit launcher, one submitit job per
trial in synchronous batches of `parallel`, no pruning; and `peer`, an idealised peer: Optuna's
optimize(n_jobs=parallel) on the login node, one submitit job per trial, pruning by polling each
trial's progress and cancelling its job. Same program (tests/programs/known_reward.py: its
reward is a known function of lr and width), same trials, sampler, seed, pruner and warm-up,
same trial shape (NODES nodes) and the same number of trials at once.

    bench/study.py [--trials 8] [--parallel 2] [--nodes 2] [--steps 10] [--step-time 0.3]
                   [--queue-wait S] [--only hpctrain,peer,hydra] [--markdown FILE]

On the local cluster (tests/cluster/up.sh), under its lock:
    flock -w 3600 /run/hpctrain-cluster.lock .venv/bin/python bench/study.py --queue-wait 20

Measured for each, from squeue polled every 0.5 s (the same clock for both): wall time from the
first submit to the end, node-hours allocated (each job's RUNNING time x its nodes), wall time and
node-hours until the trial with the final best value ended, and the queue waits (a job's submit
to its RUNNING). --queue-wait S holds every job S seconds in the queue (sbatch --begin=now+S),
as a busy cluster would: hpctrain's workers wait once, the peer's trials each time.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
OUT = BENCH / "out" / "study"
PROGRAM = ROOT / "tests" / "programs" / "known_reward.py"
sys.path.insert(0, str(ROOT))


# ----------------------------------------------------------------------------- the cluster's clock

class Jobs(threading.Thread):
    """squeue every 0.5 s: for each job (array tasks apart) of ours, when it was seen RUNNING
    first and last, and its node count."""

    def __init__(self):
        super().__init__(daemon=True)
        self.seen: dict[str, dict] = {}
        self.submitted: dict[str, float] = {}
        self.prefixes: set[str] = set()
        self.stop = threading.Event()

    def watch(self, job_id: str, submitted: float) -> None:
        self.prefixes.add(job_id)
        self.submitted[job_id] = submitted

    def ours(self, job: str) -> str | None:
        head = job.split("_")[0]
        return head if head in self.prefixes else None

    def run(self) -> None:
        while not self.stop.is_set():
            out = subprocess.run(["squeue", "-h", "-r", "-o", "%i|%T|%D"], capture_output=True,
                                 text=True).stdout
            now = time.time()
            for line in out.splitlines():
                job, state, nodes = (line.split("|") + ["", ""])[:3]
                if self.ours(job) and state in ("RUNNING", "COMPLETING"):
                    rec = self.seen.setdefault(job, {"first": now, "nodes": int(nodes or 1)})
                    rec["last"] = now
            time.sleep(0.5)

    def node_hours(self, until: float | None = None) -> float:
        total = 0.0
        for rec in self.seen.values():
            end = rec["last"] if until is None else min(rec["last"], until)
            total += max(0.0, end - rec["first"]) * rec["nodes"] / 3600
        return total

    def waits(self) -> list[float]:
        """Each job's (array task's) submit -> RUNNING."""
        out = []
        for job, rec in self.seen.items():
            head = job.split("_")[0]
            if head in self.submitted:
                out.append(rec["first"] - self.submitted[head])
        return sorted(out)

    def pending_job(self, job_id: str) -> bool:
        """Still in the queue (submitit asks sacct, which a cluster without accounting lacks)."""
        out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%i"], capture_output=True,
                             text=True).stdout
        return bool(out.strip())

    def pending(self) -> bool:
        out = subprocess.run(["squeue", "-h", "-r", "-o", "%i"], capture_output=True, text=True).stdout
        return any(self.ours(j.strip()) for j in out.splitlines())


# ----------------------------------------------------------------------------- the two ways

def space() -> dict:
    return {"lr": {"low": 1e-5, "high": 1e-1, "log": True}, "width": {"low": 1, "high": 8}}


def hpctrain_way(a, jobs: Jobs) -> dict:
    """`hpctrain submit` of a job with a search: section; its workers do the rest."""
    import yaml
    out = OUT / "hpctrain"
    out.mkdir(parents=True, exist_ok=True)
    site = (ROOT / "site_configs" / "localcluster.yaml").read_text().replace(
        "name: localcluster", "name: bench-study")
    if a.queue_wait:
        site += f'sbatch_extra: ["--begin=now+{a.queue_wait}"]\n'
    (out / "bench-study.yaml").write_text(site)
    job = {
        "name": "bench-study", "script": str(PROGRAM), "python": sys.executable,
        "resources": {"nodes": a.nodes, "procs_per_node": 1, "time": "00:30:00"},
        "args": ["--lr=0.001", "--width=4", f"--steps={a.steps}", f"--step-time={a.step_time}"],
        "search": {"params": space(), "metric": "reward", "direction": "maximize",
                   "n_trials": a.trials, "parallel": a.parallel, "sampler": "tpe",
                   "pruner": "median", "warmup_steps": a.warmup, "seed": a.seed},
    }
    (out / "job.yaml").write_text(yaml.safe_dump(job))
    env = dict(os.environ, HPCTRAIN_HOME=str(out / "home"), HPCTRAIN_RUNS_DIR=str(out / "runs"),
               PYTHONPATH=str(ROOT), HPCTRAIN_SITE_PATH=str(out))
    t0 = time.time()
    proc = subprocess.run([sys.executable, "-m", "hpctrain", "submit", str(out / "job.yaml"),
                           "--site", "bench-study"], capture_output=True, text=True, env=env, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"hpctrain submit failed:\n{proc.stdout}{proc.stderr}")
    words = proc.stdout.split()
    run_id, job_id = words[words.index("run") + 1], words[words.index("job") + 1]
    jobs.watch(job_id, t0)
    os.environ.update(HPCTRAIN_HOME=env["HPCTRAIN_HOME"], HPCTRAIN_RUNS_DIR=env["HPCTRAIN_RUNS_DIR"])
    try:
        while jobs.pending() or time.time() - t0 < 2:
            time.sleep(1)
    except BaseException:
        subprocess.run(["scancel", job_id])  # ours: never leave a bench job behind
        raise
    t_end = time.time()
    from hpctrain.runs.records import find
    from hpctrain.search import follow
    st = follow.status(find(run_id))
    trials = [{"number": r.number, "state": r.state, "value": r.value, "started": r.started,
               "ended": r.ended, "worker": r.worker} for r in st.trials]
    return {"run": run_id, "t0": t0, "end": t_end, "trials": trials}


def peer_trial(program: str, args: list, run_dir: str, root: str) -> None:
    """One trial inside its submitit job, on every task: torch's environment from Slurm's, then
    the same program as hpctrain runs (its progress API from hpctrain's rank side)."""
    import runpy
    import submitit
    submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
    os.environ["HPCTRAIN_RUN_DIR"] = run_dir
    sys.path.insert(0, root)
    from hpctrain.rank import progress
    sys.modules["hpctrain_progress"] = progress
    sys.argv = [program, *args]
    try:
        runpy.run_path(program, run_name="__main__")
    except SystemExit as exc:
        if exc.code:
            raise


def peer_way(a, jobs: Jobs) -> dict:
    """Optuna's optimize() with n_jobs threads on this machine; each trial one submitit job,
    its progress polled and reported, its job cancelled when the pruner says so."""
    import optuna
    import submitit
    from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock
    from hpctrain.rank.records import read_progress
    out = OUT / "peer"
    import shutil
    shutil.rmtree(out, ignore_errors=True)  # a trial must never read an earlier run's progress
    out.mkdir(parents=True)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    journal = out / "journal.log"
    journal.unlink(missing_ok=True)
    storage = optuna.storages.JournalStorage(JournalFileBackend(
        str(journal), lock_obj=JournalFileOpenLock(str(journal))))
    # threads ask while others run, as hpctrain's workers do
    study = peer_study(a, storage)
    extra = {"begin": f"now+{a.queue_wait}"} if a.queue_wait else {}
    lock = threading.Lock()
    t0 = time.time()

    def objective(trial):
        lr = trial.suggest_float("lr", 1e-5, 1e-1, log=True)
        width = trial.suggest_int("width", 1, 8)
        run_dir = out / "trials" / f"{trial.number:04d}"
        (run_dir / "status").mkdir(parents=True, exist_ok=True)
        ex = submitit.AutoExecutor(folder=str(out / "submitit"), cluster="slurm")
        ex.update_parameters(slurm_partition="debug", nodes=a.nodes, tasks_per_node=1,
                             cpus_per_task=1, timeout_min=30, slurm_mem="1000M",
                             slurm_additional_parameters=extra)
        submitted = time.time()
        job = ex.submit(peer_trial, str(PROGRAM), [f"--lr={lr}", f"--width={width}",
                        f"--steps={a.steps}", f"--step-time={a.step_time}"], str(run_dir), str(ROOT))
        with lock:
            jobs.watch(str(job.job_id), submitted)
        trial.set_user_attr("job_id", str(job.job_id))
        reported = -1
        started = None
        while not (job.done() or (started and not jobs.pending_job(str(job.job_id)))):
            started = started or jobs.seen.get(str(job.job_id), {}).get("first")
            reports = [p for p in read_progress(str(run_dir)) if p.rank == 0]
            if reports and reports[0].step > reported and "reward" in reports[0].metrics:
                reported = reports[0].step
                trial.report(reports[0].metrics["reward"], reported)
                if trial.should_prune():
                    job.cancel()
                    trial.set_user_attr("ended", time.time())
                    raise optuna.TrialPruned()
            time.sleep(0.5)
        job.results()  # every task's; raises when the trial failed
        trial.set_user_attr("started", started or submitted)
        trial.set_user_attr("ended", time.time())
        final = [p for p in read_progress(str(run_dir)) if p.rank == 0]
        return final[0].metrics["reward"]

    try:
        study.optimize(objective, n_trials=a.trials, n_jobs=a.parallel, catch=(Exception,))
    except BaseException:
        for job in jobs.submitted:
            subprocess.run(["scancel", job])
        raise
    while jobs.pending():
        time.sleep(1)
    trials = [{"number": t.number, "state": t.state.name, "value": t.value,
               "started": t.user_attrs.get("started"), "ended": t.user_attrs.get("ended")}
              for t in study.get_trials(deepcopy=False)]
    return {"t0": t0, "end": time.time(), "trials": trials}


def peer_study(a, storage):
    """The peers' study: hpctrain's TPE (search/spaces.py: seed, constant liar, start-up trials)
    and, for the pruning peer, its median pruner with the same start-up and warm-up."""
    import optuna
    return optuna.create_study(
        storage=storage, direction="maximize",
        sampler=optuna.samplers.TPESampler(seed=a.seed, constant_liar=True,
                                           n_startup_trials=min(10, max(2, a.trials // 3))),
        pruner=optuna.pruners.MedianPruner(n_startup_trials=max(1, min(a.parallel, 3)),
                                           n_warmup_steps=a.warmup))


def hydra_way(a, jobs: Jobs) -> dict:
    """What users run (issue 41's "usual way"): Hydra's Optuna sweeper with its submitit
    launcher. The sweeper asks for `n_jobs` trials, the launcher submits them as one submitit
    array (`executor.map_array`) and waits for every result (`[j.results()[0] for j in jobs]`),
    then the sweeper tells the values and asks for the next batch: synchronous batches (hydra
    #2257, #3091 closed as not planned) and no pruning (hydra #1954 open: the sweeper has no
    pruner, and pruning one trial of a batch would not start the next any sooner). Its sweeper
    and launcher are modelled here with Optuna and submitit themselves (Hydra's plugin pins
    optuna<3), with hpctrain's sampler settings."""
    import optuna
    import shutil
    import submitit
    from hpctrain.rank.records import read_progress
    out = OUT / "hydra"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = peer_study(a, None)
    extra = {"begin": f"now+{a.queue_wait}"} if a.queue_wait else {}
    ex = submitit.AutoExecutor(folder=str(out / "submitit"), cluster="slurm")
    ex.update_parameters(slurm_partition="debug", nodes=a.nodes, tasks_per_node=1,
                         cpus_per_task=1, timeout_min=30, slurm_mem="1000M",
                         slurm_array_parallelism=a.parallel, slurm_additional_parameters=extra)
    t0 = time.time()
    left = a.trials
    try:
        while left > 0:
            batch = [study.ask() for _ in range(min(a.parallel, left))]
            args = []
            for trial in batch:
                lr = trial.suggest_float("lr", 1e-5, 1e-1, log=True)
                width = trial.suggest_int("width", 1, 8)
                run_dir = out / "trials" / f"{trial.number:04d}"
                (run_dir / "status").mkdir(parents=True, exist_ok=True)
                args.append((str(PROGRAM), [f"--lr={lr}", f"--width={width}", f"--steps={a.steps}",
                             f"--step-time={a.step_time}"], str(run_dir), str(ROOT)))
            submitted = time.time()
            batch_jobs = ex.map_array(peer_trial, *zip(*args))
            jobs.watch(str(batch_jobs[0].job_id).split("_")[0], submitted)
            for trial, job in zip(batch, batch_jobs):
                while not (job.done() or (jobs.seen.get(str(job.job_id))
                                          and not jobs.pending_job(str(job.job_id)))):
                    time.sleep(0.5)
                run_dir = out / "trials" / f"{trial.number:04d}"
                rec = jobs.seen.get(str(job.job_id), {})
                trial.set_user_attr("started", rec.get("first", submitted))
                # The cluster's clock (its job's last RUNNING look), not when this loop got to
                # it: a trial of the batch that ended first is counted from its own end.
                trial.set_user_attr("ended", rec.get("last", time.time()))
                final = [p for p in read_progress(str(run_dir)) if p.rank == 0]
                try:
                    job.results()
                    study.tell(trial, final[0].metrics["reward"])
                except Exception:  # noqa: BLE001 - a failed trial, as the sweeper records it
                    study.tell(trial, state=optuna.trial.TrialState.FAIL)
            left -= len(batch)
    except BaseException:
        for job in jobs.submitted:
            subprocess.run(["scancel", job])
        raise
    while jobs.pending():
        time.sleep(1)
    trials = [{"number": t.number, "state": t.state.name, "value": t.value,
               "started": t.user_attrs.get("started"), "ended": t.user_attrs.get("ended")}
              for t in study.get_trials(deepcopy=False)]
    return {"t0": t0, "end": time.time(), "trials": trials}


# ----------------------------------------------------------------------------- summing up

def summary(name: str, res: dict, jobs: Jobs, target: float) -> dict:
    done = [t for t in res["trials"] if t["state"] == "COMPLETE" and t["value"] is not None]
    best = max(done, key=lambda t: t["value"]) if done else None
    best_end = best["ended"] if best and best["ended"] else None
    waits = jobs.waits()
    hit = sorted((t["ended"], t["number"]) for t in done if t["value"] >= target and t["ended"])
    t_hit = hit[0][0] if hit else None
    return {
        "way": name, "wall_s": res["end"] - res["t0"], "node_hours": jobs.node_hours(),
        "best": None if best is None else best["value"], "best_trial": best and best["number"],
        "to_best_s": None if best_end is None else best_end - res["t0"],
        "node_hours_to_best": None if best_end is None else jobs.node_hours(best_end),
        "target": target, "to_target_s": None if t_hit is None else t_hit - res["t0"],
        "node_hours_to_target": None if t_hit is None else jobs.node_hours(t_hit),
        "complete": len(done), "pruned": sum(t["state"] == "PRUNED" for t in res["trials"]),
        "failed": sum(t["state"] == "FAIL" for t in res["trials"]),
        "jobs": len({j.split("_")[0] for j in jobs.seen}), "waits_s": waits,
        "wait_total_s": sum(waits),
    }


def markdown(rows: list[dict], a) -> str:
    head = ("| way | wall | node-hours | best (trial) | to best: wall / node-hours | "
            f"to reward >= {a.target}: wall / node-hours | complete / pruned / failed | jobs | "
            "queue waits (sum) |\n|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    for r in rows:
        best = "-" if r["best"] is None else f"{r['best']:.4f} (#{r['best_trial']})"
        to_best = ("-" if r["to_best_s"] is None else
                   f"{r['to_best_s']:.0f} s / {r['node_hours_to_best']:.4f}")
        to_target = ("-" if r["to_target_s"] is None else
                     f"{r['to_target_s']:.0f} s / {r['node_hours_to_target']:.4f}")
        lines.append(f"| {r['way']} | {r['wall_s']:.0f} s | {r['node_hours']:.4f} | {best} | "
                     f"{to_best} | {to_target} | {r['complete']} / {r['pruned']} / {r['failed']} | {r['jobs']} | "
                     f"{len(r['waits_s'])}: {r['wait_total_s']:.0f} s |")
    ours = next((r for r in rows if r["way"] == "hpctrain"), None)
    for peer in (r for r in rows if r["way"] != "hpctrain"):
        if ours is None or not peer["node_hours"]:
            continue
        line = f"hpctrain / {peer['way']} node-hours: {ours['node_hours'] / peer['node_hours']:.2f}x in all"
        if ours["node_hours_to_target"] and peer["node_hours_to_target"]:
            line += (f", {ours['node_hours_to_target'] / peer['node_hours_to_target']:.2f}x to reward "
                     f">= {a.target}")
        if ours.get("node_hours_to_common") and peer.get("node_hours_to_common"):
            line += (f", {ours['node_hours_to_common'] / peer['node_hours_to_common']:.2f}x to the "
                     f"best value every way reached ({ours['common']:.4f})")
        lines += ["", line + " (goal <= 0.6x)"]
    lines.append(f"\n{a.trials} trials, {a.parallel} at once, {a.nodes}-node trials, {a.steps} steps x "
                 f"{a.step_time} s, queue wait {a.queue_wait} s")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--step-time", type=float, default=0.3)
    ap.add_argument("--warmup", type=int, default=2, help="steps before the pruner may stop a trial")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--queue-wait", type=int, default=0,
                    help="seconds every job waits in the queue (sbatch --begin=now+S)")
    ap.add_argument("--target", type=float, default=-0.5,
                    help="a reward that counts as found (the optimum is 0 at lr 1e-3, width 4): "
                    "wall time and node-hours until a trial reached it")
    ap.add_argument("--only", default="hpctrain,peer,hydra")
    ap.add_argument("--markdown", help="also write the table here")
    a = ap.parse_args()
    rows, runs = [], []
    for name in a.only.split(","):
        jobs = Jobs()
        jobs.start()
        res = {"hpctrain": hpctrain_way, "peer": peer_way, "hydra": hydra_way}[name](a, jobs)
        jobs.stop.set()
        jobs.join()
        rows.append(summary(name, res, jobs, a.target))
        runs.append((res, jobs))
        print(json.dumps(rows[-1]), flush=True)
    # The same best value for every way: the lowest of their bests, which each one reached;
    # node-hours and wall time until each first reached it.
    bests = [r["best"] for r in rows if r["best"] is not None]
    if len(bests) == len(rows) and rows:
        common = min(bests)
        for row, (res, jobs) in zip(rows, runs):
            hit = min(t["ended"] for t in res["trials"] if t["state"] == "COMPLETE"
                      and t["value"] is not None and t["value"] >= common and t["ended"])
            row.update(common=common, to_common_s=hit - res["t0"],
                       node_hours_to_common=jobs.node_hours(hit))
            print(json.dumps({"way": row["way"], "common": common, "to_common_s": row["to_common_s"],
                              "node_hours_to_common": row["node_hours_to_common"]}), flush=True)
    table = markdown(rows, a)
    print(table)
    if a.markdown:
        Path(a.markdown).write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
