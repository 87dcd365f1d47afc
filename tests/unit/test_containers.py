"""Containers (hpctrain/job/containers.py): the checks, the argument lists against each runtime's
documented flags, Isaac Lab's cluster guide argument by argument, and the word quoting.
Apptainer, Singularity and pyxis cannot be installed on this machine; Podman runs for real in
tests/slurm/test_containers.py."""
from __future__ import annotations

import re
import shlex
import subprocess
import sys

import pytest

from hpctrain.errors import HpctrainError
from hpctrain.job.load import load_job
from hpctrain.job.plan import make_plan
from hpctrain.rendering.quoting import cwords as _cwords
from hpctrain.rank.before.container import descendants
from hpctrain.submission import render
from tests.conftest import ROOT
from tests.unit.test_libraries import SLURM_FILLED

SITE = ("name: boxes\nscheduler: slurm\nenv: {NCCL_SOCKET_IFNAME: ib}\n"
        "containers: {runtimes: [apptainer, singularity, pyxis, podman, docker]}\n")
BASE = {"name": "c", "script": "train.py", "python": "python", "runs_dir": "/runs",
        "resources": {"nodes": 2, "gpus_per_node": 4}}


@pytest.fixture
def site(tmp_path, monkeypatch, home):
    (tmp_path / "boxes.yaml").write_text(SITE)
    monkeypatch.chdir(tmp_path)
    return str(tmp_path / "boxes.yaml")


def plan_for(site, container, **extra):
    job = load_job(dict(BASE, container=container, **extra), site=site)
    return make_plan(job, "/runs/c/1")


# Each runtime's options as its documentation lists them (name -> takes a value), for the
# subcommand hpctrain uses: `apptainer exec` (apptainer.org/docs/user/latest/cli/apptainer_exec),
# pyxis' srun options (github.com/NVIDIA/pyxis, README "Usage"), `podman run`
# (docs.podman.io/en/latest/markdown/podman-run.1.html), `docker run` (docs.docker.com/reference/cli/docker/container/run).
APPTAINER_EXEC = {"--cleanenv": False, "--nv": False, "--bind": True, "--pwd": True,
                  "--writable-tmpfs": False, "--containall": False, "--env": True}
PYXIS_SRUN = {"--container-image", "--container-mounts", "--container-workdir", "--container-env",
              "--container-name", "--container-remap-root", "--container-mount-home",
              "--no-container-mount-home", "--container-writable"}
PODMAN_RUN = {"--network=host": False, "--init": False, "--env": True, "-v": True,
              "--workdir": True, "--device": True, "--ulimit": True, "--rm": False,
              "--sig-proxy=false": False, "--log-driver=passthrough": False, "--name": True,
              "--label": True}
DOCKER_RUN = {"--network=host": False, "--init": False, "--env": True, "-v": True,
              "--workdir": True, "--gpus": True}


def options(words: list[str], known: dict) -> list[str]:
    """Walk an argument list with a runtime's option table; returns what follows the options
    (the image); fails on an option the runtime does not document."""
    i = 0
    while i < len(words) and words[i].startswith("-"):
        assert words[i] in known, f"{words[i]} is not a documented option"
        i += 2 if known[words[i]] else 1
    return words[i:]


def test_apptainer_argument_list(site):
    c = plan_for(site, {"runtime": "apptainer", "image": "/img/a.sif",
                        "mounts": ["/data:/data:ro"]}).container
    words = c["prefix"]
    assert words[:3] == ["apptainer", "exec", "--cleanenv"]
    assert options(words[2:], APPTAINER_EXEC) == ["/img/a.sif"]
    assert "--nv" in words
    binds = [words[i + 1] for i, w in enumerate(words) if w == "--bind"]
    wd = load_job(dict(BASE), site=site).workdir
    assert binds[:2] == ["/runs/c/1:/runs/c/1", f"{wd}:{wd}"]  # the same paths inside
    assert binds[-1] == "/data:/data:ro"
    assert c["env_prefix"] == "APPTAINERENV_"
    assert {"NCCL_SOCKET_IFNAME", "HPCTRAIN_PORT", "SLURM_PROCID"} <= set(c["names"])


def test_singularity_on_cpu_nodes_has_no_nv(site):
    c = plan_for(site, {"runtime": "singularity", "image": "docker://python:3.11"},
                 resources={"nodes": 1, "procs_per_node": 2}).container
    assert c["prefix"][:3] == ["singularity", "exec", "--cleanenv"] and "--nv" not in c["prefix"]
    assert c["env_prefix"] == "SINGULARITYENV_"
    assert options(c["prefix"][2:], APPTAINER_EXEC) == ["docker://python:3.11"]


def test_pyxis_options_are_on_the_step(site):
    c = plan_for(site, {"runtime": "pyxis", "image": "nvcr.io#nvidia/pytorch:24.01-py3",
                        "mounts": ["/data:/data:ro"], "workdir": "/workspace"},
                 secrets=["WANDB_API_KEY"]).container
    assert c["prefix"] == []  # nothing wraps torchrun: the task itself is in the container
    opts = dict(o.split("=", 1) for o in c["step_options"])
    assert set(opts) <= PYXIS_SRUN
    assert opts["--container-image"] == "nvcr.io#nvidia/pytorch:24.01-py3"
    assert opts["--container-mounts"].split(",")[0] == "/runs/c/1:/runs/c/1"
    assert opts["--container-mounts"].split(",")[-1] == "/data:/data:ro"
    assert opts["--container-workdir"] == "/workspace"
    assert opts["--container-env"].split(",")[0] == "NCCL_SOCKET_IFNAME"
    assert "WANDB_API_KEY" in opts["--container-env"].split(",")


@pytest.mark.parametrize("runtime,gpu,table", [("podman", ["--device", "nvidia.com/gpu=all"], PODMAN_RUN),
                                               ("docker", ["--gpus", "all"], DOCKER_RUN)])
def test_podman_docker_argument_lists(site, runtime, gpu, table):
    c = plan_for(site, {"runtime": runtime, "image": "localhost/x:1"}).container
    words = c["prefix"]
    assert words[:3] == ["python3", "/runs/c/1/rank", "container"]
    cut = words.index("--")
    assert words[3:cut] == [runtime]
    run = words[cut + 1:]
    assert options(run, table) == ["localhost/x:1"]
    assert " ".join(gpu) in " ".join(run)
    # Variables by name only (the runtime reads each value from its own environment).
    envs = [run[i + 1] for i, w in enumerate(run) if w == "--env"]
    assert all("=" not in e for e in envs) and "NCCL_SOCKET_IFNAME" in envs
    cpu = plan_for(site, {"runtime": runtime, "image": "x"},
                   resources={"nodes": 1, "procs_per_node": 1}).container["prefix"]
    assert gpu[0] not in cpu


def test_secret_value_never_in_the_script(site, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "s3cr3t-value")
    for runtime in ("apptainer", "pyxis", "podman"):
        job = load_job(dict(BASE, secrets=["WANDB_API_KEY"],
                            container={"runtime": runtime, "image": "/i.sif"}), site=site)
        text = render(job)
        assert "WANDB_API_KEY" in text and "s3cr3t-value" not in text


# Isaac Lab's cluster guide: docker/cluster/run_singularity.sh runs this on the compute node, with
# .env.base's DOCKER_ISAACSIM_ROOT_PATH=/isaac-sim and DOCKER_USER_HOME=/root, the profile's image
# copied to $TMPDIR, CLUSTER_PYTHON_EXECUTABLE the library's train.py and, as the script's
# arguments, the multi-GPU ones of Isaac Lab's docs (docs/source/features/multi_gpu.rst).
GUIDE = ("singularity exec"
         " -B $TMPDIR/docker-isaac-sim/cache/kit:/isaac-sim/kit/cache:rw"
         " -B $TMPDIR/docker-isaac-sim/cache/ov:/root/.cache/ov:rw"
         " -B $TMPDIR/docker-isaac-sim/cache/pip:/root/.cache/pip:rw"
         " -B $TMPDIR/docker-isaac-sim/cache/glcache:/root/.cache/nvidia/GLCache:rw"
         " -B $TMPDIR/docker-isaac-sim/cache/computecache:/root/.nv/ComputeCache:rw"
         " -B $TMPDIR/docker-isaac-sim/logs:/root/.nvidia-omniverse/logs:rw"
         " -B $TMPDIR/docker-isaac-sim/data:/root/.local/share/ov/data:rw"
         " -B $TMPDIR/docker-isaac-sim/documents:/root/Documents:rw"
         " -B $TMPDIR/isaaclab:/workspace/isaaclab:rw"
         " -B $CLUSTER_ISAACLAB_DIR/logs:/workspace/isaaclab/logs:rw"
         " --nv --writable --containall $TMPDIR/isaac-lab-base.sif"
         " bash -c 'export ISAACLAB_PATH=/workspace/isaaclab && cd /workspace/isaaclab &&"
         " /isaac-sim/python.sh scripts/reinforcement_learning/{lib}/train.py {args}'")
GUIDE_ARGS = "--task=Isaac-Cartpole-v0 --headless --distributed"  # + --ml_framework jax for JAX
# Where hpctrain keeps what the guide copies to $TMPDIR and back at every job.
CACHE_DIR = "$HOME/.cache/hpctrain/isaac-sim"
EXAMPLES = ROOT / "examples" / "isaaclab"


def guide(library: str) -> dict:
    """The guide's command, taken apart: binds (source, target:mode), flags, image, the shell
    line's steps and the interpreter's argv."""
    words = shlex.split(GUIDE.format(lib={"skrl_jax": "skrl"}.get(library, library),
                                     args=GUIDE_ARGS + (" --ml_framework jax" if library == "skrl_jax" else "")))
    assert words[:2] == ["singularity", "exec"]
    binds, flags, i = [], [], 2
    while words[i].startswith("-"):
        if words[i] == "-B":
            src, rest = words[i + 1].split(":", 1)
            binds.append((src, rest))
            i += 2
        else:
            flags.append(words[i])
            i += 1
    image, (shell, dash_c, line) = words[i], words[i + 1:]
    assert (shell, dash_c) == ("bash", "-c")
    *steps, run = line.split(" && ")
    return {"binds": binds, "flags": flags, "image": image, "steps": steps, "argv": shlex.split(run)}


def shell_words(script: str, name: str) -> list[str]:
    """A bash array of the rendered script, as bash would split it (${VAR} written as $VAR)."""
    body = script.split(f"\n{name}=(", 1)[1].split(")\n", 1)[0]
    return [re.sub(r"\$\{(\w+)\}", r"$\1", w) for w in shlex.split(body.replace("\\\n", " "))]


def launch_on_a_node(script: str) -> list[str]:
    """What every node runs: LAUNCH with its CONTAINER and AGENT arrays spelled out."""
    out = []
    for w in shell_words(script, "LAUNCH"):
        array = re.fullmatch(r"\$\{(\w+)\[@\]\}", w)
        out += shell_words(script, array.group(1)) if array else [w]
    return out


@pytest.mark.parametrize("library", ["rl_games", "rsl_rl", "skrl", "skrl_jax"])
def test_isaaclab_launch_matches_the_cluster_guide(site, library):
    """The example a user copies (examples/isaaclab/apptainer_LIB.yaml) against the guide's
    command, argument by argument: every difference is one named here, with its reason."""
    job = load_job(EXAMPLES / f"apptainer_{library}.yaml", site=site, runs_dir="/runs")
    script = render(job)
    run, wd = f"/runs/{job.spec.name}/RUN_ID", job.workdir
    g = guide(library)
    words = launch_on_a_node(script)

    # 1. The Slurm step. The guide asks for 8 CPUs per GPU (submit_job_slurm.sh); torchrun's
    # libraries start one task per node, JAX one task per GPU (skrl's own launcher's layout).
    if library == "skrl_jax":
        step = ["srun", "--nodes=$NNODES", "--ntasks=$(( NNODES * 4 ))", "--ntasks-per-node=4",
                "--distribution=block", "--cpus-per-task=8"]
    else:
        step = ["srun", "--nodes=$NNODES", "--ntasks=$NNODES", "--ntasks-per-node=1",
                "--cpus-per-task=32"]
    step += ["--gpus-per-node=4", "--kill-on-bad-exit=1"]
    assert words[:len(step)] == step
    words = words[len(step):]

    # 2. The variables cross by name: --cleanenv, then each exported as APPTAINERENV_NAME by a
    # wrapper (the guide's --containall passes none, and it bakes secrets into its shell line).
    assert words[:2] == ["bash", "-c"] and words[3] == "hpctrain-container"
    assert 'export "APPTAINERENV_$v=${!v}"' in words[2] and words[2].endswith('exec "$@"')
    words = words[4:]

    # 3. The container, from the guide's: the same eight caches at the same places, rw, kept in a
    # persistent per-user directory (the guide copies them to $TMPDIR and back at every job);
    # no copy of a checkout bound over /workspace/isaaclab (the image's own is used) and the
    # run and working directories bound at their own paths instead of isaaclab/logs.
    caches = [(src.replace("$TMPDIR/docker-isaac-sim", CACHE_DIR), rest) for src, rest in g["binds"]
              if src.startswith("$TMPDIR/docker-isaac-sim/")]
    assert len(caches) == 8 and all(rest.endswith(":rw") for _, rest in caches)
    assert [rest for _, rest in g["binds"] if not rest.endswith(":rw") or
            rest.startswith("/workspace/isaaclab")] == ["/workspace/isaaclab:rw", "/workspace/isaaclab/logs:rw"]
    # --writable and --containall need a sandbox image and hide the run directory: --cleanenv
    # keeps the host's environment out just the same; the working directory is --pwd, not cd.
    assert g["flags"] == ["--nv", "--writable", "--containall"]
    container = ["apptainer", "exec", "--cleanenv", "--nv",
                 "--bind", f"{run}:{run}", "--bind", f"{wd}:{wd}",
                 *[w for src, rest in caches for w in ("--bind", f"{src}:{rest}")],
                 "--pwd", wd, "$SCRATCH/images/isaac-lab.sif"]
    assert words[:len(container)] == container
    words = words[len(container):]

    # 4. The interpreter: the guide's `export ISAACLAB_PATH=/workspace/isaaclab &&
    # /isaac-sim/python.sh` is what `isaaclab.sh -p` does.
    assert g["steps"] == ["export ISAACLAB_PATH=/workspace/isaaclab", "cd /workspace/isaaclab"]
    assert g["argv"][0] == "/isaac-sim/python.sh"
    if library != "skrl_jax":
        # torchrun's agent ignores SIGUSR2 (each rank's bootstrap takes it).
        assert words[:4] == ["bash", "-c", 'trap "" USR2; exec "$@"', "hpctrain-agent"]
        words = words[4:]
    assert words[:2] == ["/workspace/isaaclab/isaaclab.sh", "-p"]
    words = words[2:]

    # 5. The launcher of the multi-GPU docs, its node layout filled from Slurm (c10d rendezvous on
    # the first node instead of a fixed master, node rank left to the rendezvous).
    if library != "skrl_jax":
        # torch.distributed.run's main, started by hpctrain's launch after its node check
        # (rank/preflight.launch): the arguments are torchrun's own.
        torchrun = ["$RUN_DIR/rank", "launch", "60", "--nnodes=$NNODES", "--nproc-per-node=4",
                    "--rdzv-backend=c10d", "--rdzv-endpoint=$HEAD:$PORT", "--rdzv-id=$HPCTRAIN_JOB_ID"]
        assert words[:len(torchrun)] == torchrun
        words = words[len(torchrun):]
        filled = [w.split("=")[0][2:].replace("-", "_") for w in words[:-3]]
        assert set(filled) <= SLURM_FILLED, filled
        words = words[len(filled):]

    # 6. The rank side, which runs the guide's program in-process: its train.py (absolute, as the
    # working directory is the job's rather than /workspace/isaaclab) with every argument.
    assert words == ["$RUN_DIR/rank", "run", "$RUN_DIR/bootstrap.json"]  # and nothing else
    program = make_plan(job, run).program
    assert program == ["/workspace/isaaclab/" + g["argv"][1], *g["argv"][2:]]
    assert g["argv"][2:5] == ["--task=Isaac-Cartpole-v0", "--headless", "--distributed"]

    # 7. Isaac Sim's caches exist on every node before the container starts.
    assert make_plan(job, run).container["make_dirs"] == [src for src, _ in caches]


def test_isaac_caches_follow_the_job(site):
    plain = plan_for(site, {"runtime": "apptainer", "image": "/i.sif"}).container
    assert plain["make_dirs"] == []
    forced = plan_for(site, {"runtime": "apptainer", "image": "/i.sif", "isaac_sim_caches": True})
    assert len(forced.container["make_dirs"]) == 8


def test_stage_dir_copies_image_files_only(tmp_path, monkeypatch, home):
    (tmp_path / "s.yaml").write_text(SITE.replace("containers: {", "containers: {stage_dir: $TMPDIR/img, "))
    monkeypatch.chdir(tmp_path)
    c = plan_for(str(tmp_path / "s.yaml"), {"runtime": "apptainer", "image": "/scratch/a.sif"}).container
    assert c["stage"] == {"source": "/scratch/a.sif", "dir": "$TMPDIR/img", "target": "$TMPDIR/img/a.sif"}
    assert c["prefix"][-1] == "$TMPDIR/img/a.sif"
    job = load_job(dict(BASE, container={"runtime": "apptainer", "image": "docker://x"}),
                   site=str(tmp_path / "s.yaml"))
    assert any("not staged" in w for w in job.warnings)
    assert make_plan(job, "/r").container["stage"] is None


# ------------------------------------------------------------------------------ checks

def error(site, container, **extra) -> HpctrainError:
    with pytest.raises(HpctrainError) as info:
        load_job(dict(BASE, container=container, **extra), site=site)
    return info.value


def test_runtime_the_site_does_not_declare(tmp_path, monkeypatch, home):
    (tmp_path / "a.yaml").write_text("name: a\nscheduler: slurm\ncontainers: {runtimes: [apptainer]}\n")
    monkeypatch.chdir(tmp_path)
    e = error(str(tmp_path / "a.yaml"), {"runtime": "pyxis", "image": "x"})
    assert "not available on site 'a'" in e.what and "declares the runtimes apptainer" in e.what
    assert "a.yaml:3" in e.what  # where the site declares them


def test_pyxis_needs_slurm(home):
    e = error("local", {"runtime": "pyxis", "image": "x"}, resources={"nodes": 1})
    assert "pyxis is a plugin of Slurm's srun" in e.what and "apptainer" in e.fix


def test_local_runtime_must_be_installed(home, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no runtime at all
    e = error("local", {"runtime": "apptainer", "image": "/a.sif"}, resources={"nodes": 1})
    assert "'apptainer' is not installed on this machine" in e.what
    assert "found: no container runtime" in e.what


def test_undeclared_runtimes_warn(home):
    job = load_job(dict(BASE, container={"runtime": "apptainer", "image": "/a.sif"}),
                   site="slurm-generic")
    assert any("does not declare its container runtimes" in w for w in job.warnings)


@pytest.mark.parametrize("mount,why", [("data:/data", "not absolute"), ("/a:b", "not absolute"),
                                       ("/a:/b:rx", "not a mount option"),
                                       ("/a:/b:ro:x", "HOST:CONTAINER")])
def test_bad_mounts(site, mount, why):
    e = error(site, {"runtime": "podman", "image": "x", "mounts": ["/ok", mount]})
    assert why in e.what and "container.mounts" in e.what


def test_pyxis_mount_with_comma(site):
    e = error(site, {"runtime": "pyxis", "image": "x", "mounts": ["/a,b:/c"]})
    assert "--container-mounts separates mounts with commas" in e.what


def test_unknown_runtime_suggests(site):
    e = error(site, {"runtime": "apptainr", "image": "x"})
    assert "apptainer" in (e.fix or "")


def test_site_cache_dir_must_be_absolute(tmp_path, monkeypatch, home):
    (tmp_path / "b.yaml").write_text("name: b\ncontainers: {cache_dir: cache}\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(HpctrainError) as info:
        load_job(dict(BASE), site=str(tmp_path / "b.yaml"))
    assert "containers.cache_dir 'cache' is not an absolute path" in info.value.what


def test_site_default_container(tmp_path, monkeypatch, home):
    (tmp_path / "d.yaml").write_text("name: d\ncontainers: {runtimes: [apptainer]}\n"
                                     "defaults: {container: {runtime: apptainer, image: /site.sif}}\n")
    monkeypatch.chdir(tmp_path)
    job = load_job(dict(BASE), site=str(tmp_path / "d.yaml"))
    assert job.spec.container.image == "/site.sif"
    assert make_plan(job, "/r").container["prefix"][-1] == "/site.sif"


# ------------------------------------------------------------------------------ words

def test_container_words_expand_only_variables(tmp_path):
    words = ["$HOME/c:/c", "${USER}x", "a$$b", "$(touch CANARY)", "`touch CANARY`", "a,b", "", "$"]
    out = subprocess.run(["bash", "-c", f"printf '%s\\n' {_cwords(words)}"], cwd=tmp_path,
                         env={"HOME": "/h", "USER": "u", "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[:-1] == ["/h/c:/c", "ux", "a$b", "$(touch CANARY)", "`touch CANARY`",
                                    "a,b", "", "$"]
    assert not (tmp_path / "CANARY").exists()


def test_run_dir_with_dollar_is_bound_literally(site):
    p = make_plan(load_job(dict(BASE, container={"runtime": "apptainer", "image": "/i.sif"}),
                           site=site), "/runs/$HOME/1")
    binds = [w for w in p.container["prefix"] if w.startswith("/runs")]
    assert binds[0] == "/runs/$$HOME/1:/runs/$$HOME/1"
    out = subprocess.run(["bash", "-c", f"printf '%s' {_cwords(binds[:1])}"], capture_output=True,
                         text=True, check=True).stdout
    assert out == "/runs/$HOME/1:/runs/$HOME/1"


# ------------------------------------------------------------------------------ supervisor

def test_descendants_finds_the_whole_tree():
    proc = subprocess.Popen(["bash", "-c", "sleep 30 & bash -c 'sleep 30 & wait' & wait"])
    try:
        for _ in range(100):
            tree = descendants(proc.pid)
            if len(tree) >= 4:
                break
            subprocess.run(["sleep", "0.05"])
        assert tree[0] == proc.pid and len(tree) == 4, tree
    finally:
        for pid in reversed(descendants(proc.pid)):
            subprocess.run(["kill", str(pid)])
        proc.wait()


def test_supervisor_usage():
    out = subprocess.run([sys.executable, "-m", "hpctrain.rank", "container", "podman"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "usage: rank container" in out.stderr
