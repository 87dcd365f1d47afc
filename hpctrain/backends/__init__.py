"""Where a rendered job goes, and who answers for it afterwards: one module per scheduler.

    slurm/       sbatch / squeue / sacct / scancel       templates/slurm/
                 (records: their output parsed; detect: `site detect`; login: the login-node
                 transport for clusters reached over ssh; rest: the slurmrestd transport,
                 restapi its HTTP client, restjobs the jobs in its words)
    local.py     this machine, no scheduler              templates/local/
    ssh/         hosts reached over ssh, no scheduler    templates/ssh/ (openssh: the ssh side)
    submitit.py  Python functions, through submitit      (the Slurm or local script of its site)

Adding a scheduler: a module (or a folder) here with a subclass of base.Backend (the abstract methods say what
it must answer: submit, state, cancel, where its output lands; `header` writes the directive
table and defaults to no header), a template folder
templates/<name>/ with job.sh.j2 and array.sh.j2 that extend the shared parts, and a line in
SCHEDULERS below. Nothing outside backends/ and templates/<name>/ may ask which scheduler a job
uses: the rest asks the backend what it can do (Backend.max_nodes, .preemption, ...).
"""
from __future__ import annotations

from importlib import import_module

from .base import Backend, JobState, State

# Name -> (module, class). The site profile's `scheduler:` is one of SCHEDULERS; runs recorded
# with any of BACKENDS are answered for by it.
SCHEDULERS = {"slurm": ("slurm", "SlurmBackend"), "local": ("local", "LocalBackend"),
              "ssh": ("ssh", "SshBackend")}
BACKENDS = dict(SCHEDULERS, submitit=("submitit", "SubmititBackend"))
# Site-profile keys that only some schedulers read: a profile of another scheduler that sets one
# is refused (check_site below), so that a misplaced key never passes in silence.
SITE_KEYS = {"hosts": ("ssh",), "ssh": ("ssh", "slurm"), "sync": ("ssh",), "login": ("slurm",),
             "remote": ("slurm",), "rest": ("slurm",)}


def check_site(site, doc) -> None:
    """The site profile's scheduler and the keys only some schedulers read (checks.check_site
    asks here, so that only backends/ compares scheduler names)."""
    from ..errors import HpctrainError, did_you_mean
    if site.scheduler not in SCHEDULERS:
        raise HpctrainError(f"unknown scheduler '{site.scheduler}'", doc.where(("scheduler",)),
                            did_you_mean(site.scheduler, SCHEDULERS))
    for key, owners in SITE_KEYS.items():
        if key in doc and site.scheduler not in owners:
            raise HpctrainError(f"'{key}' is read by scheduler {' or '.join(repr(o) for o in owners)} only, and "
                                f"site '{site.name}' uses scheduler '{site.scheduler}'",
                                doc.where((key,)),
                                f"remove '{key}', or set scheduler: {owners[0]}")
    backend_class(site.scheduler).check_site(site, doc)


def backend(name: str) -> Backend:
    """The backend of that name; KeyError for an unknown one (the site schema checked it)."""
    module, cls = BACKENDS[name]
    return getattr(import_module(f".{module}", __name__), cls)()


def for_run(run) -> Backend:
    """The backend that answers for a recorded run: its scheduler's, reached through the login
    node it was submitted to when run.json says so (backends/slurm/login.py)."""
    from ..errors import HpctrainError
    rec = run.record
    where = run.path / "run.json"
    if rec.backend not in BACKENDS:
        raise HpctrainError(f"{where}: 'backend' is {rec.backend[:40]!r}, which this hpctrain "
                            "does not know", fix=f"valid: {', '.join(sorted(BACKENDS))}; a newer "
                            "hpctrain wrote it, or the file was changed: restore it")
    if rec.scheduler is not None and rec.scheduler not in SCHEDULERS:
        raise HpctrainError(f"{where}: 'scheduler' is {rec.scheduler[:40]!r}, which this "
                            "hpctrain does not know", fix=f"valid: {', '.join(sorted(SCHEDULERS))}")
    chosen = backend(rec.backend)
    chosen.check_record(run)
    if rec.extra.get("rest") is not None:  # through slurmrestd (backends/slurm/rest.py)
        rest = import_module(".slurm.rest", __name__)
        # where the requests go is the user's own profile's, never the run directory's
        return rest.RestBackend(chosen, rest.trusted(rec.extra["rest"], str(where)))
    far = rec.extra.get("remote")
    if far:
        login = import_module(".slurm.login", __name__)
        return login.RemoteBackend(chosen, login.checked_far(far, f"{where}: 'remote"))
    return chosen


def backend_class(name: str) -> type[Backend]:
    module, cls = BACKENDS[name]
    return getattr(import_module(f".{module}", __name__), cls)


__all__ = ["Backend", "BACKENDS", "JobState", "SCHEDULERS", "SITE_KEYS", "State", "backend",
           "backend_class", "check_site", "for_run"]
