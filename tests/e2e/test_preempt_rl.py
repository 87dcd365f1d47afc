"""A real rsl-rl (and skrl) training on the real cluster is preempted mid-run, saves with rsl-rl's own save,
is requeued by hpctrain and resumes from that checkpoint (issue 6, item 3).

2 nodes x 2 ranks. The job is signalled the way Slurm signals it ahead of a time limit or on
preemption (`scancel --signal=USR2 --batch`), once the training has written a periodic checkpoint,
so the signal lands mid-run and the resume point cannot be 0.
"""
from __future__ import annotations

import re
import sys
import time

import pytest

from tests.conftest import read_results, submitted, wait_for_job
from tests.e2e.learning import check_learned
from tests.slurm.survive import attempts, preempt, slurm_log, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slurm]

UPDATES, STEPS = 24, 16
# job file, the checkpoint glob its adapter resumes from, and the iteration (PPO update) a
# checkpoint's file name stands for: rsl-rl names it by iteration, skrl by timestep.
LIBRARIES = {
    "rsl_rl": ("examples/rl/rsl_rl_pendulum.yaml", "checkpoints/model_*.pt", "model_{}.pt", 1),
    "skrl": ("examples/rl/skrl_torch_pendulum.yaml", "checkpoints/agent_*.pt", "agent_{}.pt", STEPS),
}


@pytest.mark.parametrize("library", list(LIBRARIES))
def test_preempted_rl_training_saves_requeues_and_resumes(library, cli, cluster):
    from hpctrain.libraries import adapter
    job_file, pattern, name, per_iteration = LIBRARIES[library]
    assert pattern in adapter(library).checkpoint_globs  # resume looks where the example saves

    def iteration_of(path) -> int:
        return int(re.fullmatch(name.format(r"(\d+)"), path.name).group(1)) // per_iteration

    def checkpoint(iteration: int) -> str:
        return name.format(iteration * per_iteration)

    t0 = time.monotonic()
    # Small rollouts and a short sleep per iteration: long enough to be signalled mid-run,
    # short enough that the whole test stays well under two minutes on an idle cluster.
    args = f"args=[--updates,{UPDATES},--save-interval,3,--sleep,0.3,--num-envs,8,--steps,{STEPS}]"
    job_id, run_dir = submitted(cli("submit", job_file, "--site", cluster,
                                    "--set", f"python={sys.executable}", "--set", args).stdout)
    seen = wait_until(lambda: sorted(run_dir.glob(pattern)), 300, "a first checkpoint", job_id)
    t_ckpt = time.monotonic()
    preempt(job_id)
    info = wait_for_job(job_id, timeout=400)
    t_end = time.monotonic()
    log = slurm_log(run_dir)
    assert info["JobState"] == "COMPLETED", log[-4000:]
    assert info["Restarts"] == "1", info

    runs = attempts(run_dir)
    first = [a for a in runs if a["job_restart"] == 0]
    second = [a for a in runs if a["job_restart"] == 1]
    assert len(first) == 4 and len(second) == 4, runs
    assert all(a["started_from"] == 0 and a["resume_from"] is None for a in first), runs
    assert {a["stopped"] for a in first} == {"preempted"}, runs
    saved = {a["reached"] for a in first}
    assert len(saved) == 1, runs  # every rank stopped at the same iteration
    saved_at = saved.pop()
    # Mid-run: after the periodic checkpoint the test waited for, before the end.
    assert max(map(iteration_of, seen)) <= saved_at < UPDATES, (seen, runs)
    assert len({a["params_sha256"] for a in first}) == 1, runs  # saved weights = every rank's
    # The newest checkpoint at the requeue was the one saved on the signal, and the second run
    # (SLURM_RESTART_COUNT=1) started from exactly it: not from 0, not from an older periodic one.
    ckpts = sorted(run_dir.glob(pattern), key=iteration_of)
    before_requeue = [p for p in ckpts if iteration_of(p) <= saved_at]
    assert before_requeue[-1].name == checkpoint(saved_at), ckpts
    assert {a["started_from"] for a in second} == {saved_at}, runs
    assert {a["resume_from"] for a in second} == {str(run_dir / "checkpoints" / checkpoint(saved_at))}
    assert {a["stopped"] for a in second} == {"completed"} and {a["reached"] for a in second} == {UPDATES}

    results = read_results(run_dir)
    assert sorted(r["rank"] for r in results) == [0, 1, 2, 3]
    assert len({r["hostname"] for r in results}) == 2, results
    assert {r["iteration"] for r in results} == {UPDATES}
    assert len({r["params_sha256"] for r in results}) == 1, results
    check_learned(results)  # the resumed run trained on from the weights it loaded
    assert [r["rank"] for r in results if r["checkpoint"]] == [0]
    assert ckpts[-1].name == checkpoint(UPDATES)

    stamp = r"\[\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\] hpctrain: "
    for line in ("preemption: SIGUSR2 received; forwarded to the ranks",
                 "preemption: the ranks exited (status 0)",
                 f"preemption: requeueing job {job_id} (requeue 1 of at most ",
                 "done: all ranks exited 0"):
        assert re.search(stamp + re.escape(line), log), (line, log[-4000:])
    assert not (run_dir / "status" / "failure.json").exists()
    print(f"{library} preemption: job {job_id}, first checkpoint after {t_ckpt - t0:.1f} s, "
          f"saved at iteration {saved_at}, completed {t_end - t_ckpt:.1f} s after the signal, "
          f"{t_end - t0:.1f} s in all")
