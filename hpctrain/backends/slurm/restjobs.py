"""What a job is in slurmrestd's words, both ways: the job description a submit sends, built
from the rendered script's `#SBATCH` lines, and the job records it answers, read into the
same Records as `squeue --json` (records.py).

slurmrestd does not read `#SBATCH` lines (measured on 22.05's openapi/v0.0.38: a script's
`--partition`, `--output` and `--job-name` were ignored), so each directive hpctrain writes
becomes a field of the description. Two shapes: v0.0.38 (Slurm 22.05) and v0.0.39+ (23.02 on,
where numbers are {set, infinite, number}, the environment a list of NAME=value, flags lists,
and the script part of the job). A directive with no field in the version spoken is refused,
naming it: sending the job without it would run another job than the script says.
"""
from __future__ import annotations

import math
from typing import Annotated, Union

import msgspec
from msgspec import Meta

from ...errors import HpctrainError
from . import records, restapi

# sbatch option -> (v0.0.38 field, v0.0.39+ field, kind). kind says how the value is written.
_FIELDS = {
    "job-name": ("name", "name", "text"),
    "nodes": ("nodes", "nodes", "nodes"),
    "ntasks-per-node": ("tasks_per_node", "tasks_per_node", "int"),
    "ntasks": ("tasks", "tasks", "int"),
    "cpus-per-task": ("cpus_per_task", "cpus_per_task", "int"),
    "gpus-per-node": ("gpus_per_node", "tres_per_node", "gpus"),
    "gres": ("gres", "tres_per_node", "gres"),
    "gpus": ("gpus", "tres_per_job", "gpus"),
    "mem": ("memory_per_node", "memory_per_node", "mem"),
    "mem-per-cpu": ("memory_per_cpu", "memory_per_cpu", "mem"),
    "time": ("time_limit", "time_limit", "minutes"),
    "partition": ("partition", "partition", "text"),
    "account": ("account", "account", "text"),
    "qos": ("qos", "qos", "text"),
    "constraint": ("constraints", "constraints", "text"),
    "reservation": ("reservation", "reservation", "text"),
    "comment": ("comment", "comment", "text"),
    "dependency": ("dependency", "dependency", "text"),
    "kill-on-invalid-dep": ("kill_on_invalid_dependency", "flags", "yes"),
    "array": ("array", "array", "text"),
    "output": ("standard_output", "standard_output", "text"),
    "error": ("standard_error", "standard_error", "text"),
    "open-mode": ("open_mode", "open_mode", "mode"),
    "requeue": ("requeue", "requeue", "true"),
    "no-requeue": ("requeue", "requeue", "false"),
    "no-kill": ("no_kill", "kill_on_node_fail", "nokill"),
    "exclusive": ("exclusive", "shared", "exclusive"),
    "signal": ("signal", "kill_warning_signal", "signal"),
    "mail-type": ("mail_type", "mail_type", "list"),
    "mail-user": ("mail_user", "mail_user", "text"),
    "licenses": ("licenses", "licenses", "text"),
    "hold": ("hold", "hold", "true"),
    "nice": ("nice", "nice", "int"),
    "wckey": ("wckey", "wckey", "text"),
    "chdir": ("current_working_directory", "current_working_directory", "text"),
    "exclude": (None, "excluded_nodes", "nodelist"),
    "nodelist": (None, "required_nodes", "nodelist"),
}


def directives(script: str) -> list[tuple[str, str | None]]:
    """The `#SBATCH --key[=value]` lines at the top of a script hpctrain rendered
    (SlurmBackend.header wrote them: one option a line, a value with a space in "")."""
    out = []
    for line in script.splitlines()[1:]:
        if not line.strip():
            continue  # as sbatch: blank lines do not end the directives, commands do
        if not line.startswith("#"):
            break
        if not line.startswith("#SBATCH --"):
            continue
        key, sep, value = line[len("#SBATCH --"):].partition("=")
        if sep and len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        out.append((key, value if sep else None))
    return out


def description(script: str, version: str, env: dict[str, str], cwd: str,
                exclude: list[str] = ()) -> dict:
    """The body of POST /slurm/<version>/job/submit for this script."""
    new = version != "v0.0.38"
    job: dict = {}
    table = directives(script)
    if exclude:
        table.append(("exclude", ",".join(exclude)))
    for key, value in table:
        field = _FIELDS.get(key)
        name = field and field[1 if new else 0]
        if name is None:
            raise HpctrainError(
                f"the job's --{key} has no counterpart in slurmrestd's openapi/{version} job "
                "description, so it cannot be submitted through the site's rest: section",
                fix=(f"leave --{key} out (sbatch:, the site's sbatch_extra)" if key != "exclude"
                     else "submit --resume without leaving nodes out is not possible here: "
                     "remove the run's status/excluded.json") +
                ", or submit with Slurm's tools (a site without rest:)")
        if new and key == "signal":  # --signal=[B:]SIG@SECONDS in three fields
            batch, _, rest = value.rpartition(":") if (value or "").startswith("B:") else ("", "", value or "")
            sig, _, delay = rest.partition("@")
            job.update(kill_warning_signal=sig, kill_warning_flags=["BATCH_JOB"] if batch else [],
                       kill_warning_delay=_number(int(delay or 60), True))
            continue
        if not new and key == "signal" and (value or "").startswith("B:"):
            raise HpctrainError(
                f"slurmrestd's openapi/{version} (Slurm 22.05) cannot take --signal={value}: "
                "its parser refuses the B: (batch shell) prefix ('Invalid SIGNAL "
                "specification'), and without it the warning would reach the ranks, not the "
                "batch shell that saves and requeues the job",
                fix="set preemption: {enabled: false} in the job or the site's defaults (no "
                "warning before the time limit; `hpctrain submit --resume` starts it again), "
                "or use a cluster whose slurmrestd speaks v0.0.39 or newer (Slurm 23.02 on), or "
                "submit with Slurm's tools")
        if new and key == "kill-on-invalid-dep":  # a job flag since v0.0.40
            yes = (value or "").lower() in ("yes", "true", "1")
            job.setdefault("flags", []).append("KILL_INVALID_DEPENDENCY" if yes
                                               else "NO_KILL_INVALID_DEPENDENCY")
            continue
        job[name] = _value(field[2], key, value or "", new)
    job["environment"] = [f"{k}={v}" for k, v in env.items()] if new else dict(env)
    job["current_working_directory"] = job.get("current_working_directory", cwd)
    if new:
        return {"job": dict(job, script=script)}
    return {"script": script, "job": job}


def _number(n: int, new: bool):
    return {"set": True, "infinite": False, "number": n} if new else n


def _value(kind: str, key: str, value: str, new: bool):
    try:
        if kind == "text":
            return value
        if kind == "int":
            return int(value)
        if kind == "nodes":
            lo, _, hi = value.partition("-")
            return value if new else [int(lo), int(hi or lo)]
        if kind == "minutes":
            from ...schema.spec import slurm_seconds
            return _number(math.ceil(slurm_seconds(value) / 60), new)
        if kind == "mem":
            units = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}
            scale = units.get(value[-1:].upper())
            megabytes = math.ceil(float(value[:-1]) * scale) if scale else int(value)
            return _number(megabytes, new)
        if kind == "gpus":  # --gpus-per-node=[type:]N
            return f"gres/gpu:{value}" if new else value
        if kind == "gres":  # --gres=gpu[:type]:N
            return f"gres/{value}" if new else value
        if kind == "yes":
            return value.lower() in ("yes", "true", "1")
        if kind in ("true", "false"):
            return kind == "true"
        if kind == "nokill":  # 22.05: no_kill; later: kill_on_node_fail, the opposite
            return not new
        if kind == "mode":
            return [value.upper()] if new else value
        if kind == "exclusive":
            return ["none"] if new else (value or "true")
        if kind == "list":
            return value.split(",") if new else value
        if kind == "nodelist":
            return value.split(",")
        if kind == "signal":
            return value
    except (ValueError, TypeError):
        pass
    raise HpctrainError(f"--{key}={value} cannot be written in slurmrestd's job description",
                        fix=f"check the value of --{key} (`hpctrain render` shows the script)")


# ----------------------------------------------------------------------------- job records

# The fields of a job record that are read, typed as both shapes write them: everything else
# in an answer is skipped unread (no object is built for it), and a value of another shape
# makes the answer "not slurmrestd's" instead of costing a Python object per byte.
class _Number(msgspec.Struct, omit_defaults=True):
    """23.02 on: {"set": true, "infinite": false, "number": 5}."""
    set: Union[bool, None] = None
    infinite: Union[bool, None] = None
    number: Union[int, float, None] = None


_Num = Union[int, float, _Number, None]
_Text = Union[str, None]


class _Signal(msgspec.Struct, omit_defaults=True):
    id: _Num = None


class _ExitCode(msgspec.Struct, omit_defaults=True):
    """23.02 on: {"status": [...], "return_code": {...}, "signal": {"id": {...}, "name": ...}}."""
    return_code: _Num = None
    signal: Union[_Signal, None] = None


class JobRecord(msgspec.Struct, omit_defaults=True):
    job_id: _Num = None
    array_job_id: _Num = None
    array_task_id: _Num = None
    array_task_string: _Text = None
    job_state: Union[str, list[str], None] = None  # 22.05: "PENDING"; 23.02 on: ["PENDING", ...]
    state_reason: _Text = None
    exit_code: Union[int, _ExitCode, None] = None  # 22.05: the raw wait status
    nodes: _Text = None
    node_count: _Num = None
    start_time: _Num = None
    end_time: _Num = None
    restart_cnt: _Num = None
    standard_output: _Text = None
    dependency: _Text = None
    partition: _Text = None
    qos: _Text = None
    user_name: _Text = None
    resv_name: _Text = None


# Far more records than MAX_ANSWER holds of real ones (each is 2.5 KB or more): only an answer
# of many tiny records reaches it, which would otherwise cost seconds to read.
MAX_JOBS = 50_000


class Jobs(restapi.Answer):
    jobs: Annotated[list[JobRecord], Meta(max_length=MAX_JOBS)] = []


def parse_jobs(jobs: list) -> list[records.Record]:
    """GET /slurm/<version>/jobs' jobs (JobRecords, or the mappings they stand for) -> Records,
    by `squeue --json`'s own bounded parser: 22.05's squeue writes this API's v0.0.38 shape and
    24.11's its v0.0.39+ one ({set, infinite, number} numbers, state lists, exit-code objects),
    and that parser reads both."""
    return records.job_records(msgspec.to_builtins(jobs))
