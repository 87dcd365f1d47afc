"""Submitting and following through the cluster's REST API (slurmrestd), for a machine that has
neither Slurm's tools nor ssh to a login node (a JupyterHub, a CI runner):

    name: mycluster
    scheduler: slurm
    rest: {url: https://slurm.example.org:6820, token_from: SLURM_JWT}

- The run directory is where it would be here (runs_dir): a file system the cluster's nodes
  see too, as on the login node; `logs` and `status` read it there. The job script is the one
  sbatch would get; its `#SBATCH` lines travel as the REST job description (restjobs.py).
- submit, status/list, cancel, `submit --resume` are one HTTP request each (restapi.py);
  run.json's extra.rest names the site, the URL, the token's variable and the API version,
  never the token, and is held to the user's own profile of that site when read back
  (trusted): the site's profile, not the run directory, says where requests go.
- The job's environment is PATH plus the job's secrets and notify URL, taken from here by name
  (slurmrestd has no --export=ALL; the rendered script sets everything else itself).
- Requeue has no endpoint in slurmrestd (openapi v0.0.38-v0.0.42): requeue_allocation says so.
  A preempted job still requeues itself: its batch shell does it on the node.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Literal, Union

import msgspec
from msgspec import Meta

from ...errors import HpctrainError
from ...runs.records import Run
from ...schema.spec import NAME_PATTERN
from ..base import Backend, JobState
from ..commands import SchedulerError
from . import restapi, restjobs

# The job's PATH: the batch shell starts with no environment from here but this (and secrets).
JOB_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class RestRecord(msgspec.Struct, forbid_unknown_fields=True):
    """run.json's extra.rest, checked when read back. Its url, token_from and user must be what
    the user's own profile of that site says (trusted): a run directory never chooses them."""
    site: Annotated[str, Meta(pattern=NAME_PATTERN, max_length=100)]
    url: Annotated[str, Meta(max_length=2048)]
    token_from: Annotated[str, Meta(max_length=4096)]
    user: Union[Annotated[str, Meta(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}\Z")], None] = None
    version: Union[Literal[restapi.VERSIONS], None] = None  # type: ignore[valid-type]
    timeout: Annotated[float, Meta(gt=0, le=3600)] = 30


def record(site) -> dict:
    rest = site.rest
    return {"site": site.name, "url": rest.url, "token_from": rest.token_from, "user": rest.user,
            "version": None if rest.version == "auto" else rest.version, "timeout": rest.timeout}


def checked(rec, where: str) -> dict:
    try:
        conf = msgspec.to_builtins(msgspec.convert(rec, RestRecord))
        restapi.target(conf["url"])
        restapi.token_source(conf["token_from"])
    except (msgspec.ValidationError, restapi.Unusable) as exc:
        said = exc.what if isinstance(exc, restapi.Unusable) else str(exc)
        raise HpctrainError(f"{where}: 'rest' is not what hpctrain writes ({said})",
                            fix="restore run.json (hpctrain writes it at submit) or remove that "
                            "run directory; its values only name where requests go") from None
    return conf


def trusted(rec, where: str) -> dict:
    """run.json's extra.rest held to the user's own site profile of that name (found as --site
    finds it, never by a path): where the token goes and which token are that profile's; the
    run keeps only the API version its server answered. HpctrainError when they differ."""
    from ...schema.profiles import named, read
    conf = checked(rec, where)
    try:
        path = named(conf["site"])
    except HpctrainError as exc:
        raise HpctrainError(f"{where}: the run was submitted through slurmrestd to site "
                            f"'{conf['site']}', which is not among your site profiles",
                            fix=f"{exc.fix} (the run's requests go where your own profile of "
                            "the site says)") from None
    site, doc = read(path)
    if site.rest is None:
        raise HpctrainError(f"{where}: the run was submitted through slurmrestd to site "
                            f"'{conf['site']}', and your profile of that site ({path}) has no "
                            "rest: section", fix="add the site's rest: section back to that "
                            "profile (its requests go where your own profile says), or follow "
                            "the run where Slurm's tools are")
    restapi.check_section(site, doc)
    own = record(site)
    for key, name in (("url", "rest.url"), ("token_from", "rest.token_from"), ("user", "rest.user")):
        if str(conf[key]).rstrip("/") != str(own[key]).rstrip("/"):
            ran, yours = (restapi.shown(conf[key]), restapi.shown(own[key])) if key == "url" \
                else (str(conf[key])[:100], str(own[key])[:100])
            raise HpctrainError(
                f"{where}: 'rest.{key}' is {ran!r}, but your profile of site '{conf['site']}' "
                f"says {yours!r} ({doc.where(('rest', key))}): a run directory does not choose "
                "where your token goes, or which one", fix=f"if you changed {name} since the "
                f"submit, put it back in {path} to follow this run; else the run directory was "
                "changed by someone: remove it (nothing was sent)")
    return dict(own, version=conf["version"] if site.rest.version == "auto" else own["version"])


class NoTools:
    """Where a REST site's scheduler tools would run (commands.on): nowhere. A Slurm command
    found on this machine would answer for another cluster, or none: the checks that ask one
    (a maintenance ahead, sbatch --test-only's start estimate) say nothing instead."""

    def tool(self, command: list[str], timeout: float = 60, input: str | None = None) -> str:
        raise SchedulerError(command, None, "a site reached through slurmrestd (rest:) has no "
                             "Slurm commands here")


class ThroughRest:
    """The transport of a site with `rest:` (backends/transport.py): the run directory is the
    one here, on a file system the cluster shares (as transport.Here: the code snapshot is
    copied into it, the job runs this interpreter); the scheduler is asked over HTTP."""

    snapshots_code = True
    login: str | None = None

    def __init__(self, site):
        self.site = site

    def place(self, run_dir: Path, name: str, run_id: str) -> tuple[Path, Path | None, str | None]:
        return run_dir, None, None

    def python(self) -> list[str]:
        import sys
        return [sys.executable]

    def command(self, words: list[str]) -> list[str]:
        return ["POST", f"{self.site.rest.url.rstrip('/')}/slurm/<version>/job/submit", *words[-1:]]

    def backend(self, inner: Backend, run_dir: Path) -> Backend:
        return RestBackend(inner, record(self.site))

    def record(self, run_dir: Path) -> dict:
        return {"rest": record(self.site)}


class RestBackend(Backend):
    """Slurm's backend answered by slurmrestd: the same run directory, states and logs."""

    def __init__(self, inner: Backend, rec: dict):
        self.inner, self.rec = inner, rec
        self.name, self.script_name = inner.name, inner.script_name
        self.api = restapi.Rest(rec)

    def submit_command(self, script: Path, plan=None) -> list[str]:
        return self.inner.submit_command(script, plan)

    def _environment(self, secrets: list[str], notify: str | None) -> dict[str, str]:
        env = {"PATH": JOB_PATH}
        env.update({name: os.environ.get(name, "") for name in secrets})
        if notify and os.environ.get(notify):
            env[notify] = os.environ[notify]
        return env

    def _submit(self, run: Run, script: str, env: dict, cwd: str, exclude: list[str] = ()) -> str:
        if self.inner.name != "slurm":
            raise HpctrainError(f"site '{self.rec['site']}' is reached through slurmrestd (rest:), "
                                f"which submits job scripts, not {self.inner.name} runs",
                                fix="submit a job file (hpctrain submit), or use a site with "
                                "Slurm's tools or login:")
        version = self.api.api()
        try:
            body = restjobs.description(script, version, env, cwd, list(exclude))
        except HpctrainError as exc:
            raise HpctrainError(f"site '{self.rec['site']}': {exc.what}", fix=exc.fix) from None
        try:
            answer = self.api.call("POST", "job/submit", body, restapi.Submitted)
        except restapi.Refused as exc:
            if exc.http_status in (401, 403, 511) or "token" in (exc.fix or ""):
                raise
            raise HpctrainError(f"{exc.what.split(': ', 1)[0]}: slurmrestd refused the job: "
                                f"{exc.said}", fix="check partition/account/qos/"
                                "time against the site profile; `hpctrain submit --dry-run` "
                                "shows the script") from None
        if not isinstance(answer.job_id, int) or not 0 < answer.job_id < restjobs.records.MAX_JOB_ID:
            raise SchedulerError(["slurmrestd"], None, "no job id", what=f"site "
                                 f"'{self.rec['site']}': slurmrestd accepted the job but gave no "
                                 "job id", fix=f"look for it: hpctrain status {run.id}")
        run.update(extra=dict(run.record.extra, rest=dict(self.rec, version=version)))
        return str(answer.job_id)

    def submit(self, run: Run, prep) -> str:
        notify = prep.plan.notify["url_from"] if prep.plan.notify else None
        return self._submit(run, prep.script, self._environment(prep.plan.secrets, notify),
                            prep.plan.workdir)

    def resubmit(self, run: Run, exclude: list[str]) -> str:
        from ...runs.untrusted import job_notify_var, job_secrets, read_regular
        script = read_regular(run.path / self.script_name, 1 << 20).decode("utf-8", "replace")
        env = self._environment(job_secrets(run.path), job_notify_var(run.path))
        return self._submit(run, script, env, str(run.path), exclude)

    def _records(self):
        return restjobs.parse_jobs(self.api.call("GET", "jobs", None, restjobs.Jobs).jobs)

    def states(self, runs: list[Run]) -> list[JobState]:
        """One GET for every run (22.05's API has no job filter: the whole queue, as squeue)."""
        from .backend import SlurmBackend
        found = self._records()
        return [SlurmBackend.state_of(run, [r for r in found if restjobs.records.belongs(
                    r, str(run.record.job_id)) or r.job_id.split("_")[0] == str(run.record.job_id)])
                for run in runs]

    def adopt(self, run: Run) -> str | None:
        mine = f"{run.path}/logs/"
        for rec in self._records():
            if rec.stdout and rec.stdout.startswith(mine):
                return rec.array_job_id or rec.job_id
        return None

    def cancel(self, run: Run) -> None:
        self.abort(str(run.record.job_id))  # the array's id cancels every task

    def abort(self, job_id: str) -> None:
        if not re.fullmatch(r"[0-9]{1,19}", str(job_id)):
            raise HpctrainError(f"job id {str(job_id)[:40]!r} is not a Slurm job id",
                                fix="restore run.json's job_id")
        try:
            self.api.call("DELETE", f"job/{job_id}")
        except restapi.Refused as exc:
            # ESLURM_ALREADY_DONE: it ended between the status asked and now, as scancel allows
            if not exc.errors or any(e.error_number != 2021 for e in exc.errors):
                raise

    def requeue_allocation(self, job_ref: str) -> None:
        raise HpctrainError(
            f"site '{self.rec['site']}': slurmrestd has no requeue endpoint (openapi/"
            f"{self.api.api()}: job/submit, and job/{{id}} to read, update and cancel)",
            fix=f"requeue where Slurm's tools are (`scontrol requeue {job_ref}` on a login node; "
            "a preempted hpctrain job requeues itself from its batch shell), or start the run "
            "again through REST: hpctrain cancel RUN, then hpctrain submit --resume RUN")

    def output_files(self, run: Run, task: int | None = None) -> list[Path]:
        return self.inner.output_files(run, task)
