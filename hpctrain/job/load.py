"""Load a job: job file (or dict) + site profile + overrides -> a validated Job.

Every user error is raised here, with where its value came from (schema/origins.py); a Job that loads
can be planned and rendered. A sweep is expanded and every task validated here too.
"""
from __future__ import annotations

import os
from typing import Any, Iterable

import msgspec

from . import sites
from .checks import check, check_sweep, check_text, fill_resources, isaaclab_release, sweep_points
from .machine import check_local_sweep
from ..errors import HpctrainError
from ..schema.origins import Origins
from ..schema.spec import JobSpec, SiteProfile, deep_merge, explain, parse_override, set_path
from ..schema.yamlfile import Located, load_file

DEFAULT_SITE = "local"


class Task(msgspec.Struct, frozen=True):
    """One task of a sweep: what it changes, and the whole job it is."""
    index: int
    values: dict
    job: "Job"


class Job(msgspec.Struct, frozen=True, kw_only=True):
    """A validated job on a site: everything `plan` needs, nothing it must look up."""
    spec: JobSpec
    site: SiteProfile
    source: str  # the job file, or "<python>" for a job built in Python
    workdir: str  # where relative paths resolve at run time: the directory it was loaded in, as sbatch does
    site_ref: str = "local"  # the site as the user named it (a name or a profile path)
    warnings: tuple[str, ...] = ()
    raw: dict = msgspec.field(default_factory=dict)  # the merged document, pre-validation
    tasks: tuple[Task, ...] = ()  # a sweep's tasks, each a whole job; () without a sweep
    origins: Any = None  # origins.Origins: where each key came from, for later errors
    # The runs this job waits for, resolved (chains.resolve): ({mode, run_id, job_id, path}, ...)
    after: tuple = ()
    # Who sends the notify: events: the job itself (from its nodes), or False when
    # `submit --wait --notify` sends them from the submitting machine (never both).
    notify_from_job: bool = True

    def resolved(self) -> dict:
        """The job as validated, defaults included: what the run directory records."""
        return msgspec.to_builtins(self.spec)


def _site_choice(cli_site: str | None, doc: dict) -> tuple[str, str | None]:
    """The site's name or path, and how it was chosen when that is not obvious (for errors)."""
    if cli_site:
        return cli_site, None
    if doc.get("site"):
        return str(doc["site"]), None
    if os.environ.get("HPCTRAIN_SITE"):
        return os.environ["HPCTRAIN_SITE"], "from $HPCTRAIN_SITE"
    return DEFAULT_SITE, None


def load_job(source: str | os.PathLike | dict | Job | None = None, *, site: str | None = None,
             overrides: Iterable[str] = (), after: Any = None, **values: Any) -> Job:
    """Load and validate a job.

    source: a job.yaml path, a dict with the same keys, a loaded Job (to override it), or None
    and keyword arguments.
    site: a site name or profile path; wins over the job's own `site`.
    overrides: `key.path=value` strings, as `--set` takes them; applied last.
    after: runs this job waits for, as `--after` takes them (a run id, directory, job id, a
    Handle; "afterany:RUN"): replaces the job's own `after`.
    values: job keys given directly (Python use), applied after the source, before overrides.
    """
    if site is not None and not isinstance(site, (str, os.PathLike)):
        raise HpctrainError(f"site= takes a site name or the path of a site profile, not a "
                            f"{type(site).__name__}", "load_job(site=...)",
                            "e.g. site='localcluster', or save the profile as a YAML file and "
                            "pass its path")
    site = os.fspath(site) if site is not None else None
    if isinstance(source, Job):
        data = dict(source.raw)
        data.pop("site", None)
        return load_job(data, site=site or source.site_ref, overrides=overrides, after=after,
                        **values)
    if source is None or isinstance(source, dict):
        doc = Located(dict(source or {}), "<python>", {})
    else:
        doc = load_file(source)
    data: dict = dict(doc)
    for key, value in values.items():
        data = set_path(data, (key,), value)
    set_args: dict[tuple, str] = {}
    for text in overrides:
        path, value = parse_override(text)
        try:
            data = set_path(data, path, value)
        except ValueError as exc:
            raise HpctrainError(f"cannot set {'.'.join(path)}: {exc}", f"--set {text}",
                                "give a whole list (--set 'args=[a, b]') or an existing index"
                                ) from None
        set_args[path] = text
    flags: dict[tuple, str] = {}
    if after is not None:
        from .chains import as_text
        refs = [after] if isinstance(after, (str, os.PathLike)) or not hasattr(after, "__iter__") \
            else list(after)
        data["after"] = [as_text(r) for r in refs]
        flags[("after",)] = " ".join(f"--after {r}" for r in data["after"])

    site_name, site_from = _site_choice(site, data)
    try:
        profile, site_doc = sites.load(site_name)
    except HpctrainError as exc:
        if site_from:
            exc = HpctrainError(f"{exc.what} ({site_from})", exc.where, exc.fix)
        raise exc from None
    job = _validated(doc, data, profile, site_doc, site_name, set_args, flags, site_from)
    if job.spec.search is not None:
        notes = _check_search(job, site_doc)
        if notes:
            job = msgspec.structs.replace(
                job, warnings=tuple(dict.fromkeys((*job.warnings, *notes))))
    if job.spec.sweep is not None:
        job = _with_tasks(job, site_doc)
    return job


def _check_search(job: Job, site_doc: Located) -> list[str]:
    """A study's spaces, and every bound and choice of them as a whole job (a trial's job is
    the study's with its values in it), so that no trial can fail to load once it runs; its
    workers against what the site can start. Returns its warnings."""
    from .pbt import ignored
    from .search import apply, check_search, check_workers
    where = job.origins
    from ..backends import backend_class
    scheduler = backend_class(job.site.scheduler)
    if not scheduler.studies:
        raise HpctrainError(f"search: runs on Slurm and local sites, not on site '{job.site.name}' "
                            f"(scheduler {job.site.scheduler}): a worker must own a whole "
                            "allocation of the job's shape and start trials in it, which the ssh "
                            "hosts' launch does not offer", where(("search",)),
                            "run the study on a Slurm or the local site, or use sweep: here")
    base = dict(job.raw)
    for key in ("search", "site", "after"):
        base.pop(key, None)
    points = check_search(job.spec, where)
    check_workers(job.spec, job.site, scheduler, where)
    for point in points:
        (key, value), = point.items()
        try:
            data = apply(base, point)
            _validated(Located(data, "<python>", {}), dict(data), job.site, site_doc,
                       job.site_ref, set_args={}, flags={}, site_from=None, checked=point)
        except ValueError as exc:
            raise HpctrainError(f"search.params.{key}: {exc}", where(("search", "params", key)),
                                "search keys name job keys, e.g. env.LR or args.1") from None
        except HpctrainError as exc:
            raise HpctrainError(f"search.params.{key} = {value!r}: {exc.what}",
                                where(("search", "params", key)), exc.fix) from None
    given = job.raw.get("search")
    return ignored(job.spec, given if isinstance(given, dict) else {}, where)


def _validated(doc: Located, data: dict, profile: SiteProfile, site_doc: Located, site_name: str,
               set_args: dict, flags: dict, site_from: str | None, checked: Any = None) -> Job:
    """The job `data` on its site, every check made. `checked`: the only values that still need
    the control-character scan (a sweep task's point: the rest of its document was scanned in
    the sweep's own job); None: scan the whole document."""
    data["site"] = profile.name
    merged = deep_merge(_site_health(profile), deep_merge(profile.defaults, data))
    env_keys = {("runs_dir",): "HPCTRAIN_RUNS_DIR"} if "runs_dir" not in merged \
        and os.environ.get("HPCTRAIN_RUNS_DIR") else {}
    where = Origins(doc, site_doc, profile.name, set_args, env_keys, site_from, flags)
    if checked is None:
        check_text(merged, where)
        if env_keys:
            check_text({"runs_dir": os.environ["HPCTRAIN_RUNS_DIR"]}, where)
    else:
        for key, value in checked.items():
            check_text(value, where, tuple(key.split(".")))

    try:
        spec = msgspec.convert(merged, JobSpec)
    except msgspec.ValidationError as exc:
        raise explain(exc, JobSpec, where, merged) from None
    spec, notes = fill_resources(spec, profile, where)
    spec, found = isaaclab_release(spec, where)
    warnings = notes + found + check(spec, profile, where)
    from .chains import resolve
    return Job(spec=spec, site=profile, source=doc.source, workdir=os.getcwd(),
               warnings=tuple(dict.fromkeys(warnings)), raw=merged, site_ref=site_name,
               origins=where, after=resolve(spec, profile, where))


def _site_health(profile: SiteProfile) -> dict:
    """The site's `health:` keys (those it set), under a job's own."""
    site = msgspec.to_builtins(profile.health)
    return {"health": site} if site else {}


def _with_tasks(job: Job, site_doc: Located) -> Job:
    """The sweep's tasks, each a whole job validated as if loaded alone (from a dict, on the
    sweep's site), and each error named by its task and values. What every task shares is
    checked once: the site profile is the sweep's own (loaded and checked once, not looked up
    again per task), and the control-character scan of the shared document was made on the
    sweep's job, whose document holds every task's values too (under `sweep:`), so a task
    scans only its own point. The schema, the resource fill and every job check run per task:
    they depend on what the task changes."""
    from ..backends import backend_class
    where = job.origins
    ntasks = check_sweep(job.spec, job.site, where)
    if backend_class(job.site.scheduler).runs_here:
        check_local_sweep(job.spec, ntasks, job.site.name, where)
    base = dict(job.raw)
    base.pop("sweep", None)
    base.pop("site", None)
    base.pop("after", None)  # the array waits (job/sweep.py); its tasks, resubmitted alone, do not
    tasks = []
    warnings = list(job.warnings)
    for i, point in enumerate(sweep_points(job.spec.sweep)):
        data = base
        try:
            for key, value in point.items():
                data = set_path(data, tuple(key.split(".")), value)
            task = _validated(Located(data, "<python>", {}), dict(data), job.site, site_doc,
                              job.site_ref, set_args={}, flags={}, site_from=None, checked=point)
        except ValueError as exc:
            raise HpctrainError(f"sweep task {i}: {exc}", where(("sweep",)),
                                "sweep keys name job keys, e.g. env.LR or args") from None
        except HpctrainError as exc:
            shown = ", ".join(f"{k}={v!r}" for k, v in point.items())
            raise HpctrainError(f"sweep task {i} ({shown}): {exc.what}", where(("sweep",)),
                                exc.fix) from None
        warnings += task.warnings
        # The tasks run where the job file was loaded, whatever the current directory is now.
        tasks.append(Task(i, point, msgspec.structs.replace(
            task, source=job.source, workdir=job.workdir, warnings=())))
    return msgspec.structs.replace(job, tasks=tuple(tasks), warnings=tuple(dict.fromkeys(warnings)))


__all__ = ["Job", "Task", "load_job", "HpctrainError"]
