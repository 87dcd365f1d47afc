"""Containers: the checks of a job's `container:` and the argument lists that run each node's
launch inside it, as plain values for the plan (templates/parts/container.sh.j2 writes them).

The split stays what it is without a container: the batch shell (signal trap, requeue,
preflight, failure record) runs on the host, where scontrol is; only the per-node launch —
container -> torchrun -> bootstrap -> program — runs in the image:

- apptainer / singularity: `apptainer exec --cleanenv [--nv] --bind … --pwd W IMAGE` around
  torchrun. --cleanenv keeps the host's PYTHONPATH/LD_LIBRARY_PATH out of the image; what the
  ranks need crosses as APPTAINERENV_<NAME> (SINGULARITYENV_), exported per task from the task's
  own environment by a one-line `bash -c` on the host: secrets by name, never a value in the
  script or in an argument list (which other users of the node can read in /proc).
- pyxis (enroot): the srun step itself carries --container-image/--container-mounts/
  --container-workdir; pyxis passes the step's environment in, --container-env makes the job's
  own variables win over the image's.
- podman / docker: rank/container.py on the host runs `podman run --rm --sig-proxy=false
  --log-driver=passthrough --init --network=host --env NAME … -v …` and forwards the step's
  signals to every process of the container itself (see there: Podman's own forwarding drops
  Slurm's signals, and a killed `podman run` leaves its container running).

The run directory and the working directory are bound at the same paths, so every path in the
script and in bootstrap.json means the same inside. GPUs are passed only when the job has them.

In the container's image, mounts, workdir and the site's cache_dir/stage_dir, `$NAME` and
`${NAME}` expand on the node (`$SCRATCH/isaac-lab.sif`); `$$` is a literal '$'. Paths hpctrain
adds itself (the run directory, the working directory) are escaped so that they never expand.
"""
from __future__ import annotations

import re
import shlex

from ..errors import HpctrainError, did_you_mean
from ..schema.spec import JobSpec, SiteProfile, env_text

RUNTIMES = ("apptainer", "singularity", "pyxis", "podman", "docker")
# The runtimes whose ranks hpctrain's supervisor (rank/container.py) runs on the host.
SUPERVISED = ("podman", "docker")

# What every rank needs from the host besides the job's env and secrets: the rendezvous the
# batch shell worked out, and the task's own Slurm identity (the bootstrap's, for the tasks
# launcher and the records), and the GPUs Slurm gave the step.
RUNTIME_NAMES = (
    "HPCTRAIN_JOB_ID", "HPCTRAIN_PORT", "HPCTRAIN_SPARE_PORT", "HPCTRAIN_HEAD", "HPCTRAIN_NODES",
    "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID",
    "SLURM_NTASKS", "SLURM_NTASKS_PER_NODE", "SLURM_CPUS_PER_TASK", "SLURMD_NODENAME",
    "SLURM_JOB_NODELIST", "SLURM_RESTART_COUNT", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID",
    "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES",
    # the flight recorder's size (templates/parts/watch.sh.j2), so a hang in a container names
    # its culprit from the collectives too
    "TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE",
)

# Isaac Sim's caches and their places in Isaac Lab's image (docker/.env.base:
# DOCKER_ISAACSIM_ROOT_PATH=/isaac-sim, DOCKER_USER_HOME=/root), bound exactly as Isaac Lab's
# docker/cluster/run_singularity.sh binds them: host subdirectory -> container path.
ISAAC_SIM_CACHES = (
    ("cache/kit", "/isaac-sim/kit/cache"),
    ("cache/ov", "/root/.cache/ov"),
    ("cache/pip", "/root/.cache/pip"),
    ("cache/glcache", "/root/.cache/nvidia/GLCache"),
    ("cache/computecache", "/root/.nv/ComputeCache"),
    ("logs", "/root/.nvidia-omniverse/logs"),
    ("data", "/root/.local/share/ov/data"),
    ("documents", "/root/Documents"),
)

_VAR_PATH = re.compile(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?(/.*)?\Z")
_MOUNT_OPTS = ("ro", "rw")


def literal(path: str) -> str:
    """A path of hpctrain's own in a container word: '$' doubled, so it never expands."""
    return path.replace("$", "$$")


def _host_path_ok(path: str) -> bool:
    return path.startswith("/") or bool(_VAR_PATH.match(path))


def parse_mount(text: str) -> tuple[str, str, str | None]:
    """'SRC[:DST[:ro|rw]]' -> (src, dst, opts); ValueError with the reason."""
    parts = text.split(":")
    if len(parts) > 3 or not parts[0]:
        raise ValueError("write it as HOST, HOST:CONTAINER or HOST:CONTAINER:ro (paths without ':')")
    src = parts[0]
    dst = parts[1] if len(parts) > 1 and parts[1] else src
    opts = parts[2] if len(parts) > 2 else None
    if not _host_path_ok(src):
        raise ValueError(f"the host path '{src}' is not absolute (or $VAR/…)")
    if not dst.startswith("/") and dst != src:
        raise ValueError(f"the container path '{dst}' is not absolute")
    if opts is not None and opts not in _MOUNT_OPTS:
        raise ValueError(f"'{opts}' is not a mount option: ro or rw")
    return src, dst, opts


def runtime_command(site: SiteProfile, runtime: str) -> list[str]:
    command = site.containers.commands.get(runtime)
    return shlex.split(command) if command else [runtime]


# ----------------------------------------------------------------------------------- checks

def check(spec: JobSpec, site: SiteProfile, scheduler, where, isaac: bool) -> list[str]:
    """A job's container on its site; raises HpctrainError, returns warnings."""
    c = spec.container
    if c is None:
        return []
    warnings: list[str] = []
    at = ("container",)
    offered = scheduler.container_runtimes
    if c.runtime not in offered:
        why = ("pyxis is a plugin of Slurm's srun (srun --container-image)" if c.runtime == "pyxis"
               else f"the '{scheduler.name}' backend cannot start a container around the ranks")
        raise HpctrainError(f"container.runtime '{c.runtime}' cannot run on site '{site.name}': "
                            f"{why}", where(at + ("runtime",)),
                            ("use " + " or ".join(offered) + ", or a site whose scheduler can")
                            if offered else "use a site with scheduler slurm or local")
    declared = site.containers.runtimes
    if declared is not None:
        if c.runtime not in declared:
            has = ", ".join(declared) if declared else "none"
            raise HpctrainError(
                f"container.runtime '{c.runtime}' is not available on site '{site.name}': it "
                f"declares the runtimes {has} (containers.runtimes in {where.site(('containers', 'runtimes'))})",
                where(at + ("runtime",)),
                did_you_mean(c.runtime, declared) if declared else
                "run without a container there, or ask the site to declare its runtime")
    elif scheduler.max_nodes == 1:  # this machine: look
        import shutil
        command = runtime_command(site, c.runtime)
        if shutil.which(command[0]) is None:
            found = [r for r in RUNTIMES if r in offered and shutil.which(runtime_command(site, r)[0])]
            raise HpctrainError(
                f"container.runtime '{c.runtime}': '{command[0]}' is not installed on this machine "
                f"(site '{site.name}'); found: {', '.join(found) or 'no container runtime'}",
                where(at + ("runtime",)),
                f"install {c.runtime}, or use {found[0]}" if found else f"install {c.runtime}")
    else:
        warnings.append(f"site '{site.name}' does not declare its container runtimes "
                        f"(containers.runtimes): that its nodes have {c.runtime} is not checked")
    if not c.image.strip():
        raise HpctrainError("container.image is empty", where(at + ("image",)),
                            "e.g. image: /scratch/isaac-lab.sif or nvcr.io#nvidia/isaac-lab:2.1.0")
    for i, mount in enumerate(c.mounts):
        try:
            parse_mount(mount)
        except ValueError as exc:
            raise HpctrainError(f"container.mounts entry {mount!r}: {exc}",
                                where(at + ("mounts", i)), "e.g. /scratch/data:/data:ro") from None
        if c.runtime == "pyxis" and "," in mount:
            raise HpctrainError(f"container.mounts entry {mount!r} holds a ',': pyxis' "
                                "--container-mounts separates mounts with commas",
                                where(at + ("mounts", i)), "bind a path without commas")
    if c.workdir is not None and not (c.workdir.startswith("/") or _VAR_PATH.match(c.workdir)):
        raise HpctrainError(f"container.workdir '{c.workdir}' is not an absolute path",
                            where(at + ("workdir",)), "e.g. workdir: /workspace/isaaclab")
    for name in c.env:
        if name in spec.secrets:
            raise HpctrainError(f"'{name}' is both a secret and a value in container.env",
                                where(at + ("env", name)), f"remove {name} from container.env")
    if _isaac_caches(spec, isaac) and c.runtime == "pyxis" and "," in site.containers.cache_dir:
        raise HpctrainError("containers.cache_dir holds a ',', which pyxis' --container-mounts "
                            "cannot carry", where.site(("containers", "cache_dir")),
                            "choose a directory without commas")
    stage = site.containers.stage_dir
    if stage and c.runtime in SUPERVISED:
        warnings.append(f"site '{site.name}' stages image files to {stage}; {c.runtime} keeps "
                        "its images in its own storage, so nothing is staged")
    elif stage and not _host_path_ok(c.image):
        warnings.append(f"container.image '{c.image}' is not a file, so it is not staged to "
                        f"{stage}: the runtime fetches it on every node")
    return warnings


def check_site(site: SiteProfile, where) -> None:
    sc = site.containers
    for key in ("cache_dir", "stage_dir"):
        value = getattr(sc, key)
        if value is not None and not _host_path_ok(value):
            raise HpctrainError(f"containers.{key} '{value}' is not an absolute path (or $VAR/…)",
                                where(("containers", key)), "e.g. $TMPDIR/hpctrain or /local/scratch")
    commands = [(("containers", "host_python"), sc.host_python, "python3")]
    commands += [(("containers", "commands", r), c, r) for r, c in sc.commands.items()]
    for path, command, example in commands:
        try:
            words = shlex.split(command)
        except ValueError:
            words = []
        if not words:
            raise HpctrainError(f"{'.'.join(path)} {command!r} is not a command", where(path),
                                f"e.g. {path[-1]}: {example}")


def _isaac_caches(spec: JobSpec, isaac: bool) -> bool:
    c = spec.container
    return c.isaac_sim_caches if c.isaac_sim_caches is not None else isaac


# ------------------------------------------------------------------------------------- plan

def plan(spec: JobSpec, site: SiteProfile, run_dir: str, workdir: str, gpus: bool,
         env_names: list[str], isaac: bool) -> dict | None:
    """The container part of the launch, as plain values (see the module's docstring)."""
    c = spec.container
    if c is None:
        return None
    runtime = c.runtime
    sc = site.containers
    binds: list[str] = [f"{literal(run_dir)}:{literal(run_dir)}"]
    if workdir != run_dir and not workdir.startswith(run_dir.rstrip("/") + "/"):
        binds.append(f"{literal(workdir)}:{literal(workdir)}")
    make_dirs: list[str] = []
    if _isaac_caches(spec, isaac):
        root = sc.cache_dir.rstrip("/")
        for sub, inside in ISAAC_SIM_CACHES:
            make_dirs.append(f"{root}/{sub}")
            binds.append(f"{root}/{sub}:{inside}:rw")
    for mount in c.mounts:
        src, dst, opts = parse_mount(mount)
        binds.append(f"{src}:{dst}" + (f":{opts}" if opts else ""))
    # One bind per container path (Podman refuses a duplicate): the job's own mount wins.
    by_dest: dict[str, str] = {}
    for b in binds:
        dest = b.split(":")[1]
        by_dest.pop(dest, None)
        by_dest[dest] = b
    binds = list(by_dest.values())
    image = c.image
    stage = None
    if sc.stage_dir and runtime not in SUPERVISED and _host_path_ok(image):
        staged = f"{sc.stage_dir.rstrip('/')}/{image.rstrip('/').rsplit('/', 1)[-1]}"
        stage = {"source": image, "dir": sc.stage_dir, "target": staged}
        image = staged
    workdir_in = c.workdir or literal(workdir)
    names = list(dict.fromkeys([*env_names, *RUNTIME_NAMES]))
    command = [literal(w) for w in runtime_command(site, runtime)]
    extra = list(sc.options.get(runtime, [])) + list(c.options)
    out: dict = {"runtime": runtime, "image": image, "stage": stage, "make_dirs": make_dirs,
                 "step_options": [], "prefix": [], "env_prefix": None, "names": names,
                 "binds": binds, "supervised": runtime in SUPERVISED, "interactive": []}
    if runtime in ("apptainer", "singularity"):
        out["env_prefix"] = "APPTAINERENV_" if runtime == "apptainer" else "SINGULARITYENV_"
        words = [*command, "exec", "--cleanenv"]
        if gpus:
            words.append("--nv")
        for b in binds:
            words += ["--bind", b]
        words += ["--pwd", workdir_in, *extra, image]
        out["prefix"] = words
    elif runtime == "pyxis":
        opts = [f"--container-image={image}", f"--container-mounts={','.join(binds)}",
                f"--container-workdir={workdir_in}"]
        if env_names:  # the job's values win over the image's own (NCCL_*, PATH-like settings)
            opts.append(f"--container-env={','.join(env_names)}")
        out["step_options"] = opts + extra
    else:  # podman, docker: the supervisor adds run, --name, --rm, --sig-proxy, the log driver
        words = ["--network=host", "--init"]
        if gpus:
            words += ["--device", "nvidia.com/gpu=all"] if runtime == "podman" else ["--gpus", "all"]
        for name in names:
            words += ["--env", name]
        for b in binds:
            words += ["-v", b]
        words += ["--workdir", workdir_in, *extra, image]
        out["prefix"] = [*shlex.split(sc.host_python), f"{literal(run_dir)}/rank", "container",
                         *command, "--", *words]
        # `hpctrain shell`'s shell in the image: a terminal of its own (-it), no supervisor (the
        # terminal's signals are the shell's; --rm removes it when the shell ends).
        out["interactive"] = [*command, "run", "--rm", "-it", *words]
    return out


def container_env(spec: JobSpec) -> dict[str, str]:
    return {k: env_text(v) for k, v in spec.container.env.items()} if spec.container else {}
