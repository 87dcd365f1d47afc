"""Containers for real: Podman (Debian's) on the local Slurm cluster's nodes, 2 nodes x 2 ranks of
a real DDP training in the image tests/cluster/up.sh builds from local files (no registry).
Apptainer/Singularity and pyxis cannot be installed here: their scripts are golden-filed and
shellcheck-clean (tests/unit/test_render.py) and their argument lists unit-tested
(tests/unit/test_containers.py)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import submitted, wait_for_job
from tests.slurm.survive import (attempts, preempt, preempt_by_high_job, slurm_log,
                                 wait_for_checkpoint, wait_until)

JOB = "examples/resumable_train.yaml"  # 2 nodes x 2 ranks
# The preemption and cancel cycles with one rank per node (a rank's start costs ~3 CPU-seconds
# on this 2-core machine); the 2 x 2 training shows several ranks per node in containers.
ONE_PER_NODE = "resources.procs_per_node=1"
IMAGE = "localhost/hpctrain-test:latest"
SECRET = "s3cret-by-name"
PODMAN = ["podman", "--runtime", "runc", "--cgroup-manager=cgroupfs"]

# A sitecustomize of the test's own, on the job's PYTHONPATH: each rank records whether it runs
# in a Podman container (Podman writes /run/.containerenv into every container), the site's
# env (OMP_NUM_THREADS) and the job's secret, which crosses by name only.
PROBE = """import os, socket
if os.environ.get("RANK") and os.environ.get("HPCTRAIN_RUN_DIR"):
    d = os.path.join(os.environ["HPCTRAIN_RUN_DIR"], "results")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "where-%s-%s" % (os.environ["RANK"], os.getpid())), "w") as f:
        f.write("%s %s %s %s" % (socket.gethostname(), os.path.exists("/run/.containerenv"),
                                 os.environ.get("OMP_NUM_THREADS"), os.environ.get("HPCT_SECRET")))
"""


def mounts(extra: Path) -> list[str]:
    """The image is an empty root: the host's /usr, /etc and this interpreter (its venv, and
    every directory its .pth files add) go in read-only."""
    venv, pyhome = Path(sys.prefix), Path(sys.base_prefix)
    more = sorted({p for p in map(Path, sys.path) if p.is_dir() and not any(
        p == d or d in p.parents for d in (Path("/usr"), pyhome, venv))})
    return ["/usr:/usr:ro", "/etc:/etc:ro", f"{pyhome}:{pyhome}:ro", f"{venv}:{venv}:ro",
            *(f"{p}:{p}:ro" for p in more), f"{extra}:{extra}:ro"]


def submit(cli, cluster, tmp_path, *sets):
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "sitecustomize.py").write_text(PROBE)
    container = {"runtime": "podman", "image": IMAGE, "mounts": mounts(probe)}
    args = ["submit", JOB, "--site", cluster, "--set", f"python={sys.executable}",
            "--set", f"container={json.dumps(container)}", "--set", f"env.PYTHONPATH={probe}",
            "--set", "secrets=[HPCT_SECRET]"]
    for s in sets:
        args += ["--set", s]
    return submitted(cli(*args, env={"HPCT_SECRET": SECRET}).stdout)


def containers(job_id: str) -> list[str]:
    out = subprocess.run([*PODMAN, "ps", "-a", "--format", "{{.Names}} {{.Status}}"],
                         capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if line.startswith(f"hpct-{job_id}-")]


def no_container_left(job_id: str) -> None:
    # --rm is conmon's cleanup once the container has exited: wait for that event.
    wait_until(lambda: not containers(job_id), 60, f"no container of job {job_id}")


def where(run_dir: Path) -> list[tuple[str, ...]]:
    return [tuple(p.read_text().split()) for p in sorted((run_dir / "results").glob("where-*"))]


def test_podman_2x2_trains_in_containers(cli, cluster, tmp_path):
    job_id, run_dir = submit(cli, cluster, tmp_path, "args=[--iterations,6,--sleep,0.2,--save-every,3]")
    info = wait_for_job(job_id, timeout=400)
    log = slurm_log(run_dir)
    assert info["JobState"] == "COMPLETED", log
    runs = attempts(run_dir)
    assert sorted(a["rank"] for a in runs) == [0, 1, 2, 3], runs
    assert {a["world_size"] for a in runs} == {4} and len({a["host"] for a in runs}) == 2, runs
    assert {a["reached"] for a in runs} == {6}
    # Every rank ran inside a container, on its own node, with the job's environment.
    probes = where(run_dir)
    assert len(probes) == 4 and {p[1] for p in probes} == {"True"}, probes
    assert {p[0] for p in probes} == {a["host"] for a in runs}
    assert {p[2:] for p in probes} == {("1", SECRET)}  # the site's env, and the secret by name
    assert SECRET not in (run_dir / "job.sbatch").read_text() and SECRET not in log
    assert "rank container podman --runtime runc --cgroup-manager=cgroupfs -- --network=host --init" in log, log
    no_container_left(job_id)


def saved_once_and_resumed_from_it(run_dir, ranks: int = 2) -> None:
    """The signal reached every rank inside its container: all saved at one agreed step, and
    the requeued run started from exactly that step and trained to the end (20 iterations: the
    signal lands after the first checkpoint, at 5, with ~7 s of iterations left)."""
    runs = attempts(run_dir)
    first = [a for a in runs if a["job_restart"] == 0]
    second = [a for a in runs if a["job_restart"] == 1]
    assert len(first) == ranks and len(second) == ranks, runs
    assert {a["stopped"] for a in first} == {"preempted"}, runs
    saved = {a["reached"] for a in first}
    assert len(saved) == 1 and saved.pop() > 0, runs
    assert {a["started_from"] for a in second} == {first[0]["reached"]}, runs
    assert {a["stopped"] for a in second} == {"completed"} and {a["reached"] for a in second} == {20}


def test_podman_time_limit_warning_saves_requeues_and_resumes(cli, cluster, tmp_path):
    # The time-limit warning's path: USR2 to the batch shell, which signals the ranks itself.
    job_id, run_dir = submit(cli, cluster, tmp_path, ONE_PER_NODE,
                             "args=[--iterations,20,--sleep,0.5,--save-every,5]")
    wait_for_checkpoint(run_dir, job_id)
    preempt(job_id)
    info = wait_for_job(job_id, timeout=400)
    log = slurm_log(run_dir)
    assert info["JobState"] == "COMPLETED", log
    assert info["Restarts"] == "1", info
    saved_once_and_resumed_from_it(run_dir)
    assert "preemption: the ranks exited (status 0)" in log, log
    assert (f"preemption: the time-limit warning or a signal sent to the job: requeueing job "
            f"{job_id} (requeue 1 of at most") in log, log
    assert {p[1] for p in where(run_dir)} == {"True"}
    no_container_left(job_id)


def test_podman_real_preemption_saves_requeues_and_resumes(cli, cluster, tmp_path):
    """A real preemption: a `high` job needs the victim's nodes, Slurm SIGTERMs the step's tasks
    (each node's container supervisor, which passes the signal into its container). The ranks
    have KillWait - 2 s (3 s here) to save (README, "Containers"): an iteration of 0.5 s fits."""
    job_id, run_dir = submit(cli, cluster, tmp_path, ONE_PER_NODE,
                             "args=[--iterations,20,--sleep,0.5,--save-every,5]")
    wait_for_checkpoint(run_dir, job_id)
    high = preempt_by_high_job(job_id, tmp_path)
    info = wait_for_job(job_id, timeout=400)
    log = slurm_log(run_dir)
    assert info["JobState"] == "COMPLETED", log
    assert info["Restarts"] == "1", info
    assert wait_for_job(high, timeout=60)["JobState"] == "COMPLETED"
    saved_once_and_resumed_from_it(run_dir)
    assert (f"preemption: preempted by the scheduler: requeueing job {job_id} "
            "(requeue 1 of at most") in log, log
    assert "done: all ranks exited 0" in log, log
    assert {p[1] for p in where(run_dir)} == {"True"}
    no_container_left(job_id)


def test_podman_cancel_leaves_no_container(cli, cluster, tmp_path):
    job_id, run_dir = submit(cli, cluster, tmp_path, ONE_PER_NODE,
                             "args=[--iterations,400,--sleep,0.5,--save-every,5]")
    wait_for_checkpoint(run_dir, job_id)
    assert len(containers(job_id)) == 2, containers(job_id)  # one per node, running
    cli("cancel", str(run_dir))
    info = wait_for_job(job_id, timeout=120)
    assert info["JobState"] == "CANCELLED", info
    no_container_left(job_id)
    # And nothing of the ranks is left running on the nodes.
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(run_dir / "bootstrap.json") not in ps, ps
