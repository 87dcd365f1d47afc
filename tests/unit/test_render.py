"""Rendering: deterministic bytes, quoting in one place, and every script passes shellcheck."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from hpctrain.job.load import load_job
from hpctrain.job.plan import make_plan
from hpctrain.submission import prepare, render
from tests.shellcheck import SHELLCHECK

BASE = {"name": "ddp-check", "library": "command", "script": "train.py",
        "args": ["--steps", "10"], "python": "python"}

SITES = {
    "ib-suffix.yaml": "name: ib-suffix\nscheduler: slurm\ngpu_request: gres\ngpu_type: a100\n"
                      "head: {mode: suffix, suffix: -ib}\nmodules: [cuda/12.4]\n"
                      "setup: ['source /opt/venv/bin/activate']\nsbatch_extra: ['--reservation=rl']\n"
                      "env: {NCCL_SOCKET_IFNAME: ib, NCCL_IB_HCA: mlx5}\n",
    "iface.yaml": "name: iface\nscheduler: slurm\nhead: {mode: interface, interface: ib0}\n"
                  "port: {fixed: 29555}\nsbatch_skip: [mem]\n",
    # A site with a module system its batch shell must initialise, and options jobs may not set.
    "lmod.yaml": "name: lmod\nscheduler: slurm\nmodule_init: /usr/share/lmod/lmod/init/bash\n"
                 "modules: [cuda/12.4, 'nccl/2.21 (gpu)']\n"
                 "setup: ['# the venv', 'source ~/venvs/rl/bin/activate', 'conda activate rl']\n"
                 "sbatch_extra: ['--reservation=rl', --hold]\nsbatch_forbid: [mail-user]\n",
    # A GPU cluster with every container runtime, image staging and a scratch cache.
    "containers.yaml": "name: containers\nscheduler: slurm\nenv: {NCCL_SOCKET_IFNAME: ib}\n"
                       "containers: {runtimes: [apptainer, singularity, pyxis, podman, docker], "
                       "stage_dir: $TMPDIR/images, cache_dir: '/scratch/${USER}/isaac-sim', "
                       "options: {apptainer: [--writable-tmpfs]}}\n",
    # Workstations over ssh: every ssh: key, no shared filesystem, a head by its interface.
    "ws-lab.yaml": "name: ws-lab\nscheduler: ssh\nhosts: ws[1-4]\n"
                   "ssh: {user: me, port: 2222, identity: ~/.ssh/id_lab, host_key: accept-new, "
                   "connect_timeout: 7, options: [Compression=yes]}\n"
                   "sync: {mode: rsync, code: true}\nhead: {mode: interface, interface: eth0}\n"
                   "setup: ['source /opt/venv/bin/activate']\n",
}

# id -> (site, extra job values): a matrix over launch shapes, site styles, every library, the
# survive switches and sweeps. Each entry has a reviewed golden file: tests/golden/<id>.sh.
MATRIX = {
    "local-1x1": ("local", {}),
    "local-1x2": ("local", {"resources": {"procs_per_node": 2}}),
    "cluster-1x1": ("localcluster", {"resources": {"nodes": 1}}),
    "cluster-2x2": ("localcluster", {"resources": {"nodes": 2, "procs_per_node": 2}}),
    "generic-4x8-gpus-secrets": ("slurm-generic", {
        "resources": {"nodes": 4, "gpus_per_node": 8, "exclusive": True},
        "secrets": ["WANDB_API_KEY"], "env": {"WANDB_PROJECT": "it's quoted"}}),
    "suffix-2x4-gres-isaac-python": ("ib-suffix.yaml", {
        "resources": {"nodes": 2, "gpus_per_node": 4, "mem": "64G"},
        "python": "/opt/isaaclab/isaaclab.sh -p", "args": ["--task", "Isaac Cartpole; rm -rf /"]}),
    "iface-3x2-fixed-port": ("iface.yaml", {
        "resources": {"nodes": 3, "gpus_per_node": 2, "account": "rl", "qos": "high"},
        "setup": ["ulimit -n 65536"]}),
    # The survive switches (hpctrain/job/preemption.py): each one changes what the script holds.
    "cluster-2x1-no-preemption": ("localcluster", {"resources": {"nodes": 2},
                                                   "preemption": {"enabled": False}}),
    "cluster-2x1-term-no-requeue": ("localcluster", {"resources": {"nodes": 2},
                                                     "preemption": {"requeue": False, "signal": "TERM"}}),
    "cluster-2x1-no-preflight-restarts": ("localcluster", {
        "resources": {"nodes": 2}, "launcher": {"preflight": False, "max_restarts": 2}}),
    "cluster-1x1-preflight-restart": ("localcluster", {
        "resources": {"nodes": 1}, "launcher": {"preflight": True, "max_restarts": 1}}),
    "generic-2x4-usr1": ("slurm-generic", {
        "resources": {"nodes": 2, "gpus_per_node": 4},
        "launcher": {"preflight": True, "preflight_timeout": 30},
        "preemption": {"signal": "USR1", "lead_time": 300, "grace": 200}}),
    # Hang detection (rank/during/watch.py) on both schedulers, and the live tree instead of a snapshot.
    "cluster-2x2-hang-restart": ("localcluster", {"resources": {"nodes": 2, "procs_per_node": 2},
                                                  "launcher": {"hang_timeout": 300, "max_restarts": 1}}),
    "local-1x2-hang": ("local", {"resources": {"procs_per_node": 2}, "launcher": {"hang_timeout": 120}}),
    # Issue 31: the node sampler stops the run for idle GPUs; the batch shell ends it, not requeued.
    "cluster-2x1-idle-gpus": ("localcluster", {"resources": {"nodes": 2},
                                               "idle_gpus": {"below": 5, "for": "20m"}}),
    "cluster-1x1-no-snapshot": ("localcluster", {"resources": {"nodes": 1}, "snapshot": False}),
    # Issue 30: the job itself sends its events (rank/end/notify.py): the URL's variable by name only.
    "cluster-2x1-notify-hang": ("localcluster", {
        "resources": {"nodes": 2}, "launcher": {"hang_timeout": 300},
        "notify": {"url_from": "HOOK_URL", "format": "ntfy"}}),
    # resources.spare_nodes (issue 43): nodes + K allocated, each attempt on named nodes.
    "cluster-2x1-spare-notify-hang": ("localcluster", {
        "resources": {"nodes": 2, "spare_nodes": 1, "gpus_per_node": 1},
        "launcher": {"hang_timeout": 300}, "health": {"enabled": True},
        "notify": {"url_from": "HOOK_URL", "format": "ntfy"}}),
    # Sweeps: one job array (Slurm) or K at a time on this machine.
    "cluster-sweep": ("localcluster", {"sweep": {"grid": {"env.LR": ["0.1", "0.01"]},
                                                 "seeds": [1, 2], "parallel": 3}}),
    "local-sweep": ("local", {"sweep": {"seeds": [1, 2, 3], "parallel": 2}}),
    # Modules and setup lines under `set +u` (parts/environment.sh.j2); the job's own scheduler
    # options after the site's (the job's reservation replaces the site's); memory per CPU.
    "lmod-2x2-options": ("lmod.yaml", {
        "resources": {"nodes": 2, "gpus_per_node": 2, "mem_per_cpu": "2G"},
        "setup": ["export WANDB_MODE=offline", "module load extra || true"],
        "sbatch": {"reservation": "mine", "mail-type": ["END", "FAIL"], "exclude": "node[3-4]",
                   "comment": "two words #1", "begin": "now+10minutes", "hold": False}}),
    # A run that waits for another one (job/chains.py): --dependency and kill-on-invalid-dep; a
    # sweep that waits holds the whole array.
    "cluster-2x1-after": ("localcluster", {"resources": {"nodes": 2},
                                           "after": ["RECORDED", "afterany:4243"]}),
    "cluster-sweep-after": ("localcluster", {"after": "RECORDED",
                                             "sweep": {"seeds": [1, 2], "parallel": 2}}),
    # Hosts over ssh (templates/ssh/): --standalone on one host, one step per host on several.
    "ssh-1x1": ("locallab", {"resources": {"nodes": 1}}),
    "ssh-2x2": ("locallab", {"resources": {"nodes": 2, "procs_per_node": 2}}),
    # The site's third host is the job's spare (issue 43, item 4: templates/ssh/spares.sh.j2).
    "ssh-2x1-spare-notify": ("locallab", {"resources": {"nodes": 2, "spare_nodes": 1},
                                          "notify": {"url_from": "HOOK_URL", "format": "ntfy"}}),
    "ssh-ws-4x2-rsync-restarts-secrets": ("ws-lab.yaml", {
        "resources": {"nodes": 4, "gpus_per_node": 2}, "launcher": {"max_restarts": 1},
        "secrets": ["WANDB_API_KEY"]}),
    "ssh-sweep": ("locallab", {"resources": {"nodes": 2},
                               "sweep": {"grid": {"env.LR": ["0.1", "0.01"]}, "parallel": 2}}),
}
# Every RL library: Isaac Lab's train.py and an own script, one and several nodes, local and Slurm.
_ISAAC = {"script": None, "args": [], "task": "Isaac-Cartpole-v0", "isaaclab": "/opt/Isaac Lab"}
for _lib in ("rl_games", "rsl_rl", "skrl", "skrl_jax"):
    MATRIX.update({
        f"{_lib}-local-1x2": ("local", {"library": _lib, "resources": {"procs_per_node": 2}}),
        f"{_lib}-cluster-2x2": ("localcluster", {"library": _lib,
                                                 "resources": {"nodes": 2, "procs_per_node": 2}}),
        f"{_lib}-isaac-suffix-2x4": ("ib-suffix.yaml", {
            "library": _lib, "resources": {"nodes": 2, "gpus_per_node": 4}, **_ISAAC}),
        f"{_lib}-isaac-generic-1x2-envpython": ("slurm-generic", {
            "library": _lib, "resources": {"nodes": 1, "gpus_per_node": 2},
            "python": "$ISAACSIM_PYTHON_EXE", "seed": 3, **_ISAAC}),
    })
MATRIX.update({
    "di_engine-local-1x2": ("local", {"library": "di_engine", "script": None, "config": "cfg.py",
                                      "resources": {"procs_per_node": 2}}),
    "di_engine-cluster-2x2": ("localcluster", {"library": "di_engine", "script": None,
                                               "config": "cfg.py",
                                               "resources": {"nodes": 2, "procs_per_node": 2}}),
    # The ssh hosts with a library launched as tasks (JAX) and Isaac Lab's train.py.
    "skrl_jax-ssh-2x2": ("locallab", {"library": "skrl_jax",
                                      "resources": {"nodes": 2, "procs_per_node": 2}}),
    "rl_games-isaac-ssh-ws-2x1": ("ws-lab.yaml", {"library": "rl_games",
                                                  "resources": {"nodes": 2, "gpus_per_node": 1},
                                                  **_ISAAC}),
})
# Containers (hpctrain/job/containers.py): every runtime, GPU and CPU nodes, Isaac Lab's image layout.
MATRIX.update({
    "apptainer-2x4-gpus-secrets": ("containers.yaml", {
        "resources": {"nodes": 2, "gpus_per_node": 4}, "secrets": ["WANDB_API_KEY"],
        "env": {"WANDB_PROJECT": "it's quoted"},
        "container": {"runtime": "apptainer", "image": "/scratch/images/train.sif",
                      "mounts": ["/data:/data:ro", "$HOME/.netrc"], "env": {"ACCEPT_EULA": "Y"}}}),
    "singularity-1x2-cpu": ("containers.yaml", {
        "resources": {"nodes": 1, "procs_per_node": 2},
        "container": {"runtime": "singularity", "image": "docker://python:3.11",
                      "workdir": "/opt/work"}}),
    "pyxis-2x4-gpus": ("containers.yaml", {
        "resources": {"nodes": 2, "gpus_per_node": 4}, "secrets": ["WANDB_API_KEY"],
        "container": {"runtime": "pyxis", "image": "/scratch/images/train.sqsh",
                      "mounts": ["/data:/data:ro"], "options": ["--container-remap-root"]}}),
    "podman-cluster-2x2": ("localcluster", {
        "resources": {"nodes": 2, "procs_per_node": 2},
        "container": {"runtime": "podman", "image": "localhost/hpctrain-test:latest",
                      "mounts": ["/usr:/usr:ro", "/etc:/etc:ro"]}}),
    "docker-2x4-gpus": ("containers.yaml", {
        "resources": {"nodes": 2, "gpus_per_node": 4},
        "container": {"runtime": "docker", "image": "nvcr.io/nvidia/isaac-lab:2.1.0"}}),
    "podman-local-1x2": ("local", {
        "resources": {"procs_per_node": 2},
        "container": {"runtime": "podman", "image": "localhost/hpctrain-test:latest"}}),
})
# Isaac Lab's image layout: the example files themselves (examples/isaaclab/), so that what a user
# copies is what the golden files show.
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "isaaclab"
MATRIX["pyxis-isaac-rsl_rl-2x4"] = ("containers.yaml", EXAMPLES / "pyxis_rsl_rl.yaml")
# Isaac Lab 3.0: the one CLI from a venv (the release given, as on a laptop that cannot read the
# cluster's install), and the kit-less image.
MATRIX["isaac3-rsl_rl-generic-2x4"] = ("slurm-generic", {
    "library": "rsl_rl", "script": None, "task": "Isaac-Cartpole", "isaaclab": "/shared/isaaclab",
    "isaaclab_version": "3.0.0", "isaaclab_assets": "/shared/isaac-assets", "seed": 42,
    "args": ["--max_iterations", "500", "agent.algorithm.learning_rate=0.0003"],
    "resources": {"nodes": 2, "gpus_per_node": 4}})
MATRIX["apptainer-isaac3-kitless-rsl_rl-2x4"] = ("containers.yaml", EXAMPLES / "apptainer_kitless_rsl_rl.yaml")
for _lib in ("rl_games", "rsl_rl", "skrl", "skrl_jax"):
    MATRIX[f"apptainer-isaac-{_lib}-2x4"] = ("containers.yaml", EXAMPLES / f"apptainer_{_lib}.yaml")
GOLDEN = Path(__file__).resolve().parents[1] / "golden"
WORKDIR = "/work/job"  # the directory jobs are loaded in, as the golden files show it


@pytest.fixture
def site_dir(tmp_path, monkeypatch):
    for name, text in SITES.items():
        (tmp_path / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def job_for(site, extra):
    if isinstance(extra, Path):  # an example job file, as a user submits it
        return load_job(extra, site=site, runs_dir="/runs")
    data = dict(BASE, runs_dir="/runs")
    for k, v in extra.items():
        data[k] = v
    if "after" in data:  # runs to wait for: recorded in this test's own index
        import os
        from tests.operate_helpers import recorded_run
        runs = Path(os.environ["HPCTRAIN_HOME"]) / "recorded"
        if not runs.exists():
            recorded_run(runs, "4242", run_id="20260101-000000-rec1")
            recorded_run(runs, "4243", run_id="20260101-000000-rec2", name="prep")
        after = data["after"]
        data["after"] = ([a.replace("RECORDED", "20260101-000000-rec1") for a in after]
                         if isinstance(after, list) else after.replace("RECORDED", "20260101-000000-rec1"))
    return load_job(data, site=site)


def rendered(case: str, site_dir) -> str:
    site, extra = MATRIX[case]
    return render(job_for(site, extra)).replace(str(site_dir), WORKDIR)


@pytest.mark.parametrize("case", MATRIX)
def test_matches_golden(case, site_dir, home, update_golden):
    """Every rendered script is reviewed: a change shows as a diff of tests/golden/ in the commit
    (regenerate with `pytest tests/unit/test_render.py --update-golden`)."""
    text = rendered(case, site_dir)
    path = GOLDEN / f"{case}.sh"
    if update_golden:
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"no golden file {path}: run pytest --update-golden and review it"
    assert text == path.read_text(), f"{case} differs from {path}: run pytest --update-golden and review the diff"


@pytest.mark.parametrize("case", MATRIX)
def test_deterministic(case, site_dir, home):
    assert rendered(case, site_dir) == rendered(case, site_dir)


class Shellcheck:
    """shellcheck of the golden scripts, one process per core running ahead of the test that reads
    its result (it is most of this tier's time, one script after the other). Started from this
    thread only: subprocesses spawned from several threads at once can fail (EFAULT)."""

    def __init__(self, cases):
        self.cases, self.procs = list(cases), {}

    def result(self, case: str) -> tuple[int, str]:
        i = self.cases.index(case)
        for ahead in self.cases[i:i + (os.cpu_count() or 2)]:
            if ahead not in self.procs:
                self.procs[ahead] = subprocess.Popen(
                    [SHELLCHECK, "--severity=style", "--shell=bash", str(GOLDEN / f"{ahead}.sh")],
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        out, _ = self.procs[case].communicate()
        return self.procs[case].returncode, out


@pytest.fixture(scope="module")
def shellchecked():
    checks = Shellcheck(MATRIX)
    yield checks
    for proc in checks.procs.values():  # those a deselected test never read
        if proc.returncode is None:
            proc.kill()
            proc.communicate()


@pytest.mark.parametrize("case", MATRIX)
def test_shellcheck_clean(case, site_dir, home, shellchecked):
    # What was checked is what renders (but for the working directory's path).
    assert rendered(case, site_dir) == (GOLDEN / f"{case}.sh").read_text()
    status, said = shellchecked.result(case)
    assert status == 0, said


# `hpctrain shell`'s rcfile and interactive launch (hpctrain/interactive.py), reviewed as the
# batch scripts are: tests/golden/<case>.shell.sh and <case>.launch.sh.
SHELL_CASES = ["cluster-2x2", "apptainer-2x4-gpus-secrets", "podman-cluster-2x2", "pyxis-2x4-gpus",
               "local-1x2", "ssh-2x2", "cluster-2x1-spare-notify-hang"]
# On an ssh site the shell's `hpctrain launch` runs the job script itself as its batch shell.
LAUNCH_IS_THE_JOB_SCRIPT = {"ssh-2x2"}


@pytest.mark.parametrize("case", SHELL_CASES)
def test_shell_scripts_match_golden_and_pass_shellcheck(case, site_dir, home, tmp_path,
                                                        update_golden, monkeypatch):
    from hpctrain.interactive import prepare_shell
    monkeypatch.setenv("WANDB_API_KEY", "set where the shell is opened")
    _, rc, launch = prepare_shell(job_for(*MATRIX[case]), "RUN_ID")
    for kind, text in (("shell", rc), ("launch", launch)):
        text = text.replace(str(site_dir), WORKDIR)
        path = GOLDEN / f"{case}.{kind}.sh"
        if kind == "launch" and case in LAUNCH_IS_THE_JOB_SCRIPT:
            path = GOLDEN / f"{case}.sh"  # (reviewed there; --update-golden writes it)
            assert text == path.read_text(), f"{case}: the shell's launch is not the job script"
            (tmp_path / path.name.replace(".sh", ".launch.sh")).write_text(text)
            continue
        if update_golden:
            path.write_text(text)
        assert text == path.read_text(), f"{path} differs: run pytest --update-golden and review"
        (tmp_path / path.name).write_text(text)
    proc = subprocess.run([SHELLCHECK, "--severity=style", "--shell=bash",
                           *(str(tmp_path / f"{case}.{k}.sh") for k in ("shell", "launch"))],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


PACKAGED = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "site_configs").glob("*.yaml"))


@pytest.mark.parametrize("site,nodes", [(s, n) for s in PACKAGED for n in (1, 2)
                                        if not (s == "local" and n > 1)])  # local: one node by definition
def test_packaged_sites_render_clean(site, nodes, home, tmp_path):
    job = load_job(dict(BASE, resources={"nodes": nodes}), site=site)
    script = tmp_path / "job.sh"
    script.write_text(render(job))
    proc = subprocess.run([SHELLCHECK, "--severity=style", "--shell=bash", str(script)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


def test_secret_names_only(site_dir, home, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "s3cr3t-value")
    text = rendered("generic-4x8-gpus-secrets", site_dir)
    assert "WANDB_API_KEY" in text and "s3cr3t-value" not in text


def test_notify_url_by_name_only_and_off_when_submit_sends(site_dir, home, monkeypatch):
    monkeypatch.setenv("HOOK_URL", "http://example.invalid/t0k3n-secret")
    text = rendered("cluster-2x1-notify-hang", site_dir)
    assert "HOOK_URL" in text and "t0k3n" not in text
    assert "notify_end completed" in text and "notify_event preempted" in text
    # `submit --wait --notify` sends from the submitting machine: the job sends nothing.
    import msgspec
    job = job_for("localcluster", {"notify": {"url_from": "HOOK_URL"}})
    plan = make_plan(msgspec.structs.replace(job, notify_from_job=False), "/runs/x")
    assert plan.notify is None and make_plan(job, "/runs/x").notify["url_from"] == "HOOK_URL"


def test_dry_run_is_what_is_submitted(site_dir, home):
    job = job_for("localcluster", {"resources": {"nodes": 2}})
    prep = prepare(job, run_id="fixed")
    assert prep.submit_command == ["sbatch", "--parsable", str(prep.run_dir / "job.sbatch")]
    assert prep.script == prepare(job, run_id="fixed").script


def test_program_reaches_the_bootstrap_byte_exact(site_dir, home):
    """The program and its arguments travel in bootstrap.json, not through the shell or
    torchrun's argv (which rewrites ${local_rank} and friends)."""
    args = ["$$", "${local_rank}", "$local_rank", "a b", "'\"", "*", "--x=`id`"]
    plan = make_plan(job_for("localcluster", {"resources": {"nodes": 2}, "args": args}), "/runs/x")
    assert plan.bootstrap["program"] == ["train.py", *args]


def test_torchrun_restarts_get_a_fresh_store_per_attempt(site_dir, home):
    # torch 2.13 keeps one agent store for the whole job; restarted ranks would read the dead
    # attempt's keys (hpctrain/job/preemption.py, "torchrun's restarts").
    with_restarts = make_plan(job_for("localcluster", {"resources": {"nodes": 2},
                                                       "launcher": {"max_restarts": 1}}), "/r")
    assert with_restarts.env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" not in make_plan(job_for("localcluster", {
        "resources": {"nodes": 2}}), "/r").env
    own = make_plan(job_for("localcluster", {"resources": {"nodes": 2}, "launcher": {"max_restarts": 1},
                                             "env": {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "0"}}), "/r")
    assert own.env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "0"  # the job's own choice wins


def test_rank_check_follows_preflight(site_dir, home):
    plan = make_plan(job_for("localcluster", {"resources": {"nodes": 2},
                                              "launcher": {"preflight_timeout": 25}}), "/runs/x")
    assert plan.bootstrap["rank_check_timeout"] == 25
    off = make_plan(job_for("localcluster", {"resources": {"nodes": 2},
                                             "launcher": {"preflight": False}}), "/runs/x")
    assert off.bootstrap["rank_check_timeout"] is None
    single = make_plan(job_for("localcluster", {"resources": {"nodes": 1}}), "/runs/x")
    assert single.bootstrap["rank_check_timeout"] is None  # preflight is off by default on 1 node
    jax = make_plan(job_for("localcluster", {"library": "skrl_jax", "resources": {"nodes": 2}}), "/r")
    assert jax.bootstrap["rank_check_timeout"] is None  # no torch store for a JAX job


def test_directive_table_is_ordered_and_keyed(site_dir, home):
    plan = make_plan(job_for("ib-suffix.yaml", {"resources": {"nodes": 2, "gpus_per_node": 4,
                                                              "mem": "64G"}}), "/runs/x")
    keys = [k for k, _ in plan.directives]
    assert keys[:5] == ["job-name", "nodes", "ntasks-per-node", "cpus-per-task", "gres"]
    assert keys[-1] == "reservation"  # the site's extras come last
    assert dict(plan.directives)["gres"] == "gpu:a100:4" and plan.gpus == ("gres", "gpu:a100:4")
