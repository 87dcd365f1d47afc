"""The adapter interface every library module implements."""
from __future__ import annotations

import re
from typing import NamedTuple

from ..errors import HpctrainError
from ..schema.origins import Origins as Where
from ..schema.spec import JobSpec, SiteProfile



class RankNeeds(NamedTuple):
    """What one rank of a library needs from the node, and who says so."""
    cpus: int  # CPUs per rank
    mem_per_cpu: str  # Slurm's --mem-per-cpu form: 4048M
    source: str  # where the numbers come from, for the warning


class Adapter:
    """Defaults suit a plain torch.distributed program; libraries override what differs."""

    name = "command"
    # "torchrun": one torchrun per node starts the ranks (torch.distributed libraries).
    # "tasks": Slurm starts one task per rank and the bootstrap maps the task ids (JAX).
    launcher = "torchrun"
    # Variables the bootstrap sets per rank from its identity ({rank}, {local_rank},
    # {world_size}, {local_world_size}, {head}, {spare_port}), e.g. JAX's JAX_RANK.
    rank_env: dict[str, str] = {}
    # Variables removed from every rank's environment before the program starts.
    unset_env: tuple[str, ...] = ()
    # The ranks import torch (and use torch.distributed): the preflight's rank check may too.
    torch_library = True
    # The library puts rank i on cuda:LOCAL_RANK itself: every rank must see all of the node's
    # GPUs, and a node may not have more ranks than GPUs.
    needs_all_gpus = True
    # The CPU shims (rank/cpu_shims.SHIMS) that run this library's distributed mode on CPU.
    cpu_shims: tuple[str, ...] = ("torch",)
    # The hooks at the library's iteration boundaries (rank/train_hooks.HOOKS): progress, and
    # save-and-stop after SIGTERM or the preemption signal, with the unmodified train script.
    # None (a plain program): it reports and saves itself (hpctrain_progress, its own handler).
    train_hooks: tuple[str, ...] = ()
    # Where the library writes checkpoints (globs relative to the run directory, newest wins)
    # and the arguments that resume from one ("{checkpoint}" = its path): see resume_args().
    checkpoint_globs: tuple[str, ...] = ()
    resume_template: tuple[str, ...] = ()
    # The TensorBoard tags of the library's main metric (its mean episode return), first
    # choice first: `hpctrain plot` draws them first.
    main_scalars: tuple[str, ...] = ()
    # Settings the library restores from its checkpoint over the value it is started with:
    # (regular expression searched in a dotted key, why). Population-based training cannot
    # change them in the middle of a run (job/pbt.py).
    restored_from_checkpoint: tuple[tuple[str, str], ...] = ()

    def shims(self, spec: JobSpec) -> list[str]:
        """The CPU shims this job's ranks arm in CPU mode (cpu_shims, and what the job adds)."""
        return list(self.cpu_shims)

    def program(self, spec: JobSpec) -> list[str]:
        """What every rank runs under the bootstrap: [script, *args] (script: path or -m mod)."""
        return [spec.script or "", *map(str, spec.args)]

    def python(self, spec: JobSpec) -> list[str] | None:
        """The interpreter when the job names none; None: the one running hpctrain."""
        return None

    def run_in_run_dir(self, spec: JobSpec) -> bool:
        """Whether ranks start in the run directory (for programs that write under ./)."""
        return False

    def env(self, spec: JobSpec) -> dict[str, str]:
        """Extra environment for every rank: the job's video: bounds (a program of the user's
        records its own clips by them; the rank's video hook holds Isaac Lab to the count)."""
        v = spec.video
        if v is None:
            return {}
        return {"HPCTRAIN_VIDEO_LENGTH": str(v.length), "HPCTRAIN_VIDEO_COUNT": str(v.count),
                "HPCTRAIN_VIDEO_INTERVAL": str(v.interval)}

    def video_args(self, spec: JobSpec) -> list[str]:
        """The program's own flags asking for the job's video: (Isaac Lab's --video); []: the
        program reads HPCTRAIN_VIDEO_* (env) or records nothing."""
        return []

    def rank_needs(self, spec: JobSpec) -> RankNeeds | None:
        """The CPUs and memory one rank needs, when the library knows better than 1 CPU and
        the site's memory default: they fill resources.cpus_per_proc / mem_per_cpu where neither
        the job nor its site says, and a job asking for less gets a warning with the numbers
        (checks.fill_resources). None: no such need (a plain torch program)."""
        return None

    def check(self, spec: JobSpec, site: SiteProfile, where: Where) -> list[str]:
        """Library traps: raise HpctrainError for errors, return warnings."""
        if self.needs_all_gpus:
            gpu_masking(self.name, spec, site, where)
            r = spec.resources
            ppn = r.procs_per_node or r.gpus_per_node or 1
            if r.gpus_per_node and ppn > r.gpus_per_node:
                raise HpctrainError(
                    f"{ppn} ranks per node share {r.gpus_per_node} GPUs: {self.name} puts rank i "
                    "on cuda:LOCAL_RANK, so ranks past the last GPU fail with 'invalid device "
                    "ordinal'", where(("resources", "procs_per_node")),
                    f"set procs_per_node to {r.gpus_per_node} (or leave it out)")
        return []

    # ------------------------------------------------------------------ resume after a restart
    # On every start of a rank (first run, a requeued run, torchrun's in-allocation restart) the
    # bootstrap looks for the newest checkpoint matching checkpoint_patterns() in the run
    # directory. If there is one, it sets HPCTRAIN_RESUME_FROM to its absolute path and puts
    # resume_args() on the program's command line. If there is none, the program starts fresh.
    # The decision is made at run time, rank-side (rank/checkpoints.find_checkpoint, bootstrap.resume_argv), so
    # nothing here runs on the nodes: both methods return plain data for bootstrap.json.

    def checkpoint_patterns(self, spec: JobSpec) -> list[str]:
        """Where the library writes checkpoints: glob patterns relative to the run directory
        (absolute patterns are used as they are; `**` matches any depth).

        The newest match by modification time wins (a tie: the natural order of the names, so
        model_100.pt beats model_99.pt). Hidden files, *.tmp, *.part, *.partial and empty files
        are skipped, so a checkpoint being written (write to a temporary name, then rename) is
        never picked. The rank's working directory is the job's workdir, not the run directory:
        make the library write into the run directory ($HPCTRAIN_RUN_DIR, e.g. through its
        log-directory option in program()) so that each run resumes only from its own
        checkpoints. [] (the default): this library is never resumed.
        Example (rsl-rl writing into RUN_DIR/logs/rsl_rl/<experiment>/<time>/model_<it>.pt):
            ["logs/rsl_rl/*/*/model_*.pt"]
        """
        return list(self.checkpoint_globs)

    def resume_args(self, spec: JobSpec) -> list[str]:
        """The library's own resume option, as an argument template; [] (the default): the
        program reads HPCTRAIN_RESUME_FROM itself.

        Placeholders (str.format): {checkpoint} the checkpoint's absolute path, {name} its file
        name, {dir} its directory's absolute path, {dirname} that directory's name, {parent} the
        directory above it; {name_re} and {dirname_re}: those names as regular expressions that
        match them alone from the start (escaped, then $), for an option read as a regex. If the first element is an option already on the command line (as
        `--opt value` or `--opt=value`), the bootstrap replaces that option's value with the
        second element; every other element is appended (flags already present are not
        repeated). Examples:
            rl-games:  ["--checkpoint", "{checkpoint}"]
            skrl:      ["--checkpoint", "{checkpoint}"]
            rsl-rl:    ["--resume", "--load_run", "{dirname_re}", "--checkpoint", "{name_re}"]
        """
        return list(self.resume_template)


_RANK_VARS = re.compile(r"\$\{?(SLURM_LOCALID|SLURM_PROCID|LOCAL_RANK|RANK|SLURM_STEP_GPUS)\b")


def gpu_masking(library: str, spec: JobSpec, site: SiteProfile, where: Where) -> None:
    """Per-rank GPU masks break cuda:LOCAL_RANK: rank i > 0 sees one GPU, 'invalid device ordinal'."""
    why = (f"{library} puts rank i on cuda:LOCAL_RANK, so every rank must see all of its node's "
           "GPUs; with one GPU per rank, ranks past the first fail with 'invalid device ordinal'")
    for i, extra in enumerate(site.sbatch_extra):
        if extra.startswith(("--gpus-per-task", "--gpu-bind", "--ntasks-per-gpu")):
            raise HpctrainError(f"site '{site.name}' adds '{extra}', which gives each task its own "
                                f"GPUs: {why}", where.site(("sbatch_extra", i)),
                                f"remove {extra.split('=')[0]} from the site's sbatch_extra")
    ppn = spec.resources.procs_per_node or spec.resources.gpus_per_node or 1
    for origin, env in (("env", spec.env), (f"site '{site.name}' env", site.env)):
        value = env.get("CUDA_VISIBLE_DEVICES")
        if value is None:
            continue
        text = str(value)
        per_rank = bool(_RANK_VARS.search(text))
        too_few = not per_rank and ppn > 1 and len([v for v in text.split(",") if v.strip()]) < ppn
        if per_rank or too_few:
            raise HpctrainError(
                f"CUDA_VISIBLE_DEVICES={text} masks GPUs per rank ({ppn} ranks per node): {why}",
                where(("env", "CUDA_VISIBLE_DEVICES")) if origin == "env"
                else where.site(("env", "CUDA_VISIBLE_DEVICES")),
                "remove CUDA_VISIBLE_DEVICES: hpctrain pins each rank to cuda:LOCAL_RANK itself")
