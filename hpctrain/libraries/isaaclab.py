"""What each Isaac Lab generation implies for a library it trains: the command, the interpreter,
where checkpoints land and how a restart resumes. The release comes from the job
(`isaaclab_version`, read from the install at load: job/isaaclab.py).

- 2.x: one train.py per library under scripts/reinforcement_learning/, run with the checkout's
  `isaaclab.sh -p`: `train.py --task=T --headless --distributed [--seed=S] ARGS`.
- 3.0 and on: one CLI for every library and no scripts/ in a pip/uv install: every rank runs
  `python -m isaaclab train --rl_library LIB --task=T --distributed --run_timestamp=hpctrain
  [--seed=S] ARGS` under hpctrain's torchrun (what 3.0's own train_multigpu would start per rank).
  No --headless (3.0 rejects it: headless is its default); resume is `--checkpoint FILE`.
"""
from __future__ import annotations

import os
import re

from ..errors import HpctrainError
from ..schema.spec import JobSpec
from .base import Adapter, RankNeeds

ISAACLAB_SCRIPTS = "scripts/reinforcement_learning"
# Isaac Lab's own Slurm template (docker/cluster/submit_job_slurm.sh) gives one GPU's training
# `--cpus-per-task=8` and `--mem-per-cpu=4048`: the simulation, rendering and the environments'
# physics run on those CPUs, and one CPU per rank starves them.
ISAACLAB_RANK = RankNeeds(8, "4048M", "Isaac Lab's own cluster template "
                          "(docker/cluster/submit_job_slurm.sh: 8 CPUs and --mem-per-cpu=4048 "
                          "per GPU)")
# 3.0: every rank of a run must name the same run folder (train_multigpu passes one timestamp to
# all); one fixed name also keeps every attempt of a requeued run in one folder, so its
# checkpoints and its TensorBoard curve continue where the last attempt stopped.
RUN_FOLDER = "hpctrain"


def generation(version: str | None) -> int:
    """2 or 3 (and on): the release's major number; 2 when unknown."""
    m = re.match(r"([0-9]+)", version or "")
    return int(m.group(1)) if m else 2


def _has(args: list[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in args)


class IsaacLabAdapter(Adapter):
    """A library that Isaac Lab trains: the job names a task, hpctrain the rest.

    Isaac Lab mode: no `script`, or (2.x) a script that is Isaac Lab's own
    scripts/reinforcement_learning/<lib>/train.py. The rank runs that generation's training
    command (module docstring) from the run directory (Isaac Lab writes ./logs/<lib>/…: the run
    keeps them). Any other script is the user's own program: it gets exactly its `args`.

    Library settings (e.g. rl-games' schedule) go in `args` as Isaac Lab's Hydra overrides, as
    on Isaac Lab's own command line: `agent.params.config.schedule_type=legacy`.
    """

    train_dir = ""  # 2.x: scripts/reinforcement_learning/<train_dir>/train.py
    lab_library = ""  # 3.0: isaaclab train --rl_library <lab_library>
    extra_isaaclab_args: tuple[str, ...] = ()
    isaaclab_checkpoint_globs: tuple[str, ...] = ()
    isaaclab_resume_template: tuple[str, ...] = ()
    isaaclab3_resume_template: tuple[str, ...] = ("--checkpoint", "{checkpoint}")

    def generation(self, spec: JobSpec) -> int:
        return generation(spec.isaaclab_version)

    def train_script(self, spec: JobSpec) -> str:
        root = spec.isaaclab or ""
        return os.path.join(root, ISAACLAB_SCRIPTS, self.train_dir, "train.py") if root else \
            f"{ISAACLAB_SCRIPTS}/{self.train_dir}/train.py"

    def isaaclab_mode(self, spec: JobSpec) -> bool:
        if spec.script is None:
            return True
        return spec.script.replace(os.sep, "/").endswith(f"{ISAACLAB_SCRIPTS}/{self.train_dir}/train.py")

    def program(self, spec: JobSpec) -> list[str]:
        args = [str(a) for a in spec.args]
        if not self.isaaclab_mode(spec):
            return [spec.script or "", *args]
        if self.generation(spec) >= 3:
            out = ["-m", "isaaclab", "train", "--rl_library", self.lab_library or self.train_dir,
                   f"--task={spec.task}", "--distributed"]
            if not _has(args, "--run_timestamp"):
                out.append(f"--run_timestamp={RUN_FOLDER}")
        else:
            out = [spec.script or self.train_script(spec), f"--task={spec.task}", "--headless",
                   "--distributed"]
        out += [a for a in self.extra_isaaclab_args if a not in args]
        if spec.seed is not None and not _has(args, "--seed"):
            out.append(f"--seed={spec.seed}")
        return out + self.video_args(spec) + args

    def video_args(self, spec: JobSpec) -> list[str]:
        """Isaac Lab's --video for the job's video: section, given only to its own training
        (job/video.py has checked by then that the job's GPUs can render). 3.0 records one clip
        with --video_interval=0 and records from a headless Kit visualizer it creates (RTX);
        2.x needs --enable_cameras for the rendering, and records every interval (the rank's
        video hook stops at the count)."""
        v = spec.video
        if v is None or not self.isaaclab_mode(spec):
            return []
        interval = v.interval if v.count > 1 else 0
        out = ["--video", f"--video_length={v.length}"]
        if self.generation(spec) >= 3:
            return out + [f"--video_interval={interval}"]
        # 2.x's RecordVideo triggers at step % interval == 0: no 0 there
        return out + [f"--video_interval={v.interval}", "--enable_cameras"]

    def python(self, spec: JobSpec) -> list[str] | None:
        if not (self.isaaclab_mode(spec) and spec.isaaclab):
            return None
        if self.generation(spec) >= 3:
            # Read from the install when it could be (job/isaaclab.py fills `python`); else the
            # shapes 3.0 is installed in: an interpreter named by path, or a venv's bin/python.
            if os.path.basename(spec.isaaclab).startswith("python"):
                return [spec.isaaclab]
            return [os.path.join(spec.isaaclab, "bin", "python")]
        # Isaac Lab's launcher script runs its Python with every Isaac Sim path set up.
        return [os.path.join(spec.isaaclab, "isaaclab.sh"), "-p"]

    def run_in_run_dir(self, spec: JobSpec) -> bool:
        return self.isaaclab_mode(spec)

    def shims(self, spec: JobSpec) -> list[str]:
        # 3.0's own launcher picks cuda:LOCAL_RANK and refuses a CPU device with --distributed.
        extra = ["isaaclab"] if self.isaaclab_mode(spec) and self.generation(spec) >= 3 else []
        return [*self.cpu_shims, *extra]

    def rank_needs(self, spec: JobSpec) -> RankNeeds | None:
        # Each rank of Isaac Lab's training runs a simulator on its GPU; a rank without a GPU
        # (cpu_mode checks on CPU nodes) runs none of it at scale.
        if self.isaaclab_mode(spec) and spec.resources.gpus_per_node:
            return ISAACLAB_RANK
        return None

    def checkpoint_patterns(self, spec: JobSpec) -> list[str]:
        # Isaac Lab's training runs in the run directory: its ./logs/<lib>/… are the run's.
        return list(self.isaaclab_checkpoint_globs if self.isaaclab_mode(spec) else self.checkpoint_globs)

    def resume_args(self, spec: JobSpec) -> list[str]:
        if not self.isaaclab_mode(spec):
            return list(self.resume_template)
        if self.generation(spec) >= 3:
            return list(self.isaaclab3_resume_template)
        return list(self.isaaclab_resume_template)

    def check(self, spec: JobSpec, site, where) -> list[str]:
        warnings = super().check(spec, site, where)
        if self.isaaclab_mode(spec):
            if not spec.task:
                raise HpctrainError(f"library '{self.name}' runs Isaac Lab's training, which needs "
                                    "a task", where(("library",)),
                                    "add e.g. task: Isaac-Cartpole (Isaac Lab 3.0; "
                                    "Isaac-Cartpole-v0 in 2.x), or set script: to your own "
                                    "training script")
            if spec.script is None and not spec.isaaclab:
                raise HpctrainError(f"library '{self.name}' without 'script' runs Isaac Lab's "
                                    "training, but the job does not say where Isaac Lab is",
                                    where(("library",)),
                                    "add isaaclab: with the path of Isaac Lab on the nodes (a "
                                    "checkout, a pip/uv venv or its python), or set script: to "
                                    "your own training script")
        elif spec.task:
            warnings.append(f"'task: {spec.task}' is passed only to Isaac Lab's training; "
                            f"'{spec.script}' gets exactly its args: add --task there if it takes one")
        return warnings


__all__ = ["IsaacLabAdapter", "ISAACLAB_RANK", "ISAACLAB_SCRIPTS", "RUN_FOLDER", "generation"]
