"""The adapter interface every library module implements."""
from __future__ import annotations

from typing import Callable

from ..spec import JobSpec

Where = Callable[[tuple], str]


class Adapter:
    """Defaults suit a plain torch.distributed program; libraries override what differs."""

    name = "command"
    # "torchrun": one torchrun per node starts the ranks (torch.distributed libraries).
    # "tasks": Slurm starts one task per rank and the bootstrap maps the task ids (JAX).
    launcher = "torchrun"

    def program(self, spec: JobSpec) -> list[str]:
        """What every rank runs under the bootstrap: [script, *args] (script: path or -m mod)."""
        return [spec.script or "", *map(str, spec.args)]

    def env(self, spec: JobSpec) -> dict[str, str]:
        """Extra environment for every rank."""
        return {}

    def check(self, spec: JobSpec, where: Where) -> list[str]:
        """Library traps: raise HpctrainError for errors, return warnings."""
        return []

    # ------------------------------------------------------------------ resume after a restart
    # On every start of a rank (first run, a requeued run, torchrun's in-allocation restart) the
    # bootstrap looks for the newest checkpoint matching checkpoint_patterns() in the run
    # directory. If there is one, it sets HPCTRAIN_RESUME_FROM to its absolute path and puts
    # resume_args() on the program's command line. If there is none, the program starts fresh.
    # The decision is made at run time, rank-side (bootstrap.find_checkpoint / resume_argv), so
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
        return []

    def resume_args(self, spec: JobSpec) -> list[str]:
        """The library's own resume option, as an argument template; [] (the default): the
        program reads HPCTRAIN_RESUME_FROM itself.

        Placeholders (str.format): {checkpoint} the checkpoint's absolute path, {name} its file
        name, {dir} its directory's absolute path, {dirname} that directory's name, {parent} the
        directory above it. If the first element is an option already on the command line (as
        `--opt value` or `--opt=value`), the bootstrap replaces that option's value with the
        second element; every other element is appended (flags already present are not
        repeated). Examples:
            rl-games:  ["--checkpoint", "{checkpoint}"]
            skrl:      ["--checkpoint", "{checkpoint}"]
            rsl-rl:    ["--resume", "--load_run", "{dirname}", "--checkpoint", "{name}"]
        """
        return []
