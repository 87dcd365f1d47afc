"""Slurm's interactive side: `hpctrain shell` (salloc, then a shell on the first node) and
`hpctrain attach` (srun --jobid --overlap into a running job).

Measured on Slurm 22.05 (tests/slurm/test_interactive.py): salloc releases the allocation when
its command ends and when it gets SIGHUP (a closed terminal); a step started with --overlap
shares every resource with the job's other steps, so the shell's step leaves the whole
allocation to the launch, and `attach` starts beside a running launch step.
"""
from __future__ import annotations

import os
from pathlib import Path

from ...errors import HpctrainError
from ...runs.untrusted import NODE
from .. import commands

# sbatch options salloc does not take, or that mean nothing to an interactive allocation (no
# batch output, no requeue, no batch-shell signal): left out of salloc's command line.
BATCH_ONLY = frozenset({
    "array", "batch", "error", "export", "export-file", "ignore-pbs", "input",
    "kill-on-invalid-dep", "no-requeue", "open-mode", "output", "parsable", "propagate",
    "requeue", "signal", "test-only", "wait", "wrap"})


def salloc_options(directives: list[tuple[str, str | None]]) -> list[str]:
    """The directive table as salloc's options: each one an argument of its own (never a
    shell word), the batch-only ones left out."""
    return [f"--{k}" if v is None else f"--{k}={v}" for k, v in directives if k not in BATCH_ONLY]


def step_gpus(plan) -> list[str]:
    return [f"--{plan.gpus[0]}={plan.gpus[1]}"] if plan.gpus else []


def shell_command(plan, rcfile: Path, record: Path) -> list[str]:
    """salloc with the job's resources, whose command (on this host) writes the job id to
    RECORD and starts the shell on the allocation's first node (--relative=0) as a step that
    overlaps every other: the launch's steps get the whole allocation."""
    # A job with a container: the rcfile's environment, then the shell in the container
    # (in_container, templates/slurm/shell.sh.j2), not one on the node itself.
    bash = (["bash", "-c", 'source "$1" && in_container', "hpctrain-shell", str(rcfile)]
            if plan.container else ["bash", "--rcfile", str(rcfile), "-i"])
    shell = ["srun", "--pty", "--overlap", "--relative=0", "--nodes=1", "--ntasks=1",
             "--cpus-per-task=1", *step_gpus(plan), *bash]
    return ["salloc", *salloc_options(plan.directives), "bash", "-c",
            'printf "%s\\n" "$SLURM_JOB_ID" >"$1" && shift && exec "$@"', "hpctrain-shell",
            str(record), *shell]


def inside(job_id: str) -> bool:
    return os.environ.get("SLURM_JOB_ID") == job_id


def job_nodes(job_id: str) -> list[str]:
    """The running job's nodes (squeue, then scontrol's expansion), first node first."""
    try:
        listed = commands.run(["squeue", "-h", "-j", job_id, "-t", "RUNNING", "-o", "%N"]).strip()
        if not listed:
            return []
        names = commands.run(["scontrol", "show", "hostnames", listed]).split()
    except commands.SchedulerError as exc:
        raise HpctrainError(f"cannot ask Slurm for job {job_id}'s nodes: {exc.stderr or exc}",
                            fix="run it where squeue works (the login node)") from None
    bad = [n for n in names if not NODE.fullmatch(n)]
    if bad:
        raise HpctrainError(f"Slurm named a node {bad[0][:60]!r} that is not a node name",
                            fix="check `squeue -j " + job_id + " -o %N`")
    return names


# In the attach step, for a job whose ranks run in Podman or Docker containers: a shell in the
# node's first container of the job (the launch's supervisor labels each with the job and the
# node), or, with none there (yet, or any more), on the node.
_INTO_CONTAINER = (
    'tool=$1; name=$("$tool" ps --filter "label=hpctrain.job=$SLURM_JOB_ID" '
    '--filter "label=hpctrain.node=$SLURMD_NODENAME" '
    '--format "{{.Names}}" 2>/dev/null | sort | head -n 1); '
    'if [[ -n $name ]]; then exec "$tool" exec -it "$name" bash -i; fi; '
    'echo "hpctrain attach: no $tool container of job $SLURM_JOB_ID runs on $(hostname): '
    'a shell on the node" >&2; exec bash -i')


def attach_command(job_id: str, node: str, workdir: str, tool: str | None = None) -> list[str]:
    """A shell on that node of the running job, as a step beside its others; in the ranks'
    container there when the job's ranks run in one of `tool` (podman, docker)."""
    shell = (["bash", "-c", _INTO_CONTAINER, "hpctrain-attach", tool] if tool
             else ["bash", "-i"])
    return ["srun", f"--jobid={job_id}", "--overlap", "--pty", "--nodes=1", "--ntasks=1",
            f"--nodelist={node}", f"--chdir={workdir}", *shell]


def on_nodes_command(job_id: str, nodes: list[str], command: list[str]) -> list[str]:
    n = len(nodes)
    return ["srun", f"--jobid={job_id}", "--overlap", f"--nodes={n}", f"--ntasks={n}",
            "--ntasks-per-node=1", f"--nodelist={','.join(nodes)}", *command]
