"""Load a job: job file (or dict) + site profile + overrides -> a validated Job."""
from __future__ import annotations

import os
from typing import Any, Iterable

import msgspec

from . import sites
from .checks import check
from .errors import HpctrainError
from .spec import JobSpec, SiteProfile, deep_merge, explain, parse_override, set_path
from .yamlfile import Located, load_file

DEFAULT_SITE = "local"


class Job(msgspec.Struct, frozen=True, kw_only=True):
    """A validated job on a site: everything `plan` needs, nothing it must look up."""
    spec: JobSpec
    site: SiteProfile
    source: str  # the job file, or "<python>" for a job built in Python
    workdir: str  # where relative paths resolve at run time: the directory it was loaded in, as sbatch does
    site_ref: str = "local"  # the site as the user named it (a name or a profile path)
    warnings: tuple[str, ...] = ()
    raw: dict = msgspec.field(default_factory=dict)  # the merged document, pre-validation

    def resolved(self) -> dict:
        """The job as validated, defaults included: what the run directory records."""
        return msgspec.to_builtins(self.spec)


def _site_name(cli_site: str | None, doc: dict) -> str:
    return cli_site or doc.get("site") or os.environ.get("HPCTRAIN_SITE") or DEFAULT_SITE


def load_job(source: str | os.PathLike | dict | None = None, *, site: str | None = None,
             overrides: Iterable[str] = (), **values: Any) -> Job:
    """Load and validate a job.

    source: a job.yaml path, or a dict with the same keys (or None and keyword arguments).
    site: a site name or profile path; wins over the job's own `site`.
    overrides: `key.path=value` strings, as `--set` takes them; applied last.
    values: job keys given directly (Python use), applied after the source, before overrides.
    """
    if source is None or isinstance(source, dict):
        doc = Located(dict(source or {}), "<python>", {})
    else:
        doc = load_file(source)
    data: dict = dict(doc)
    for key, value in values.items():
        data = set_path(data, (key,), value)
    set_paths: dict[tuple, str] = {}
    for text in overrides:
        path, value = parse_override(text)
        data = set_path(data, path, value)
        set_paths[path] = text

    site_name = _site_name(site, data)
    profile, site_doc = sites.load(site_name)
    data["site"] = profile.name
    merged = deep_merge(profile.defaults, data)

    def where(path: tuple) -> str:
        for n in range(len(path), 0, -1):
            if path[:n] in set_paths:
                return f"--set {set_paths[path[:n]]}"
        if path and path[0] in doc or not path:
            return doc.where(path)
        if path:
            return site_doc.where(("defaults",) + tuple(path)) + f" (site '{profile.name}' defaults)"
        return doc.source

    try:
        spec = msgspec.convert(merged, JobSpec)
    except msgspec.ValidationError as exc:
        raise explain(exc, JobSpec, where) from None
    warnings = check(spec, profile, where)
    workdir = os.getcwd()
    return Job(spec=spec, site=profile, source=doc.source, workdir=workdir,
               warnings=tuple(warnings), raw=merged, site_ref=site_name)


def with_overrides(job: Job, overrides: Iterable[str]) -> Job:
    """A new Job: this one's merged document with more `key.path=value` overrides."""
    data = dict(job.raw)
    data.pop("site", None)
    return load_job(data, site=job.site_ref, overrides=overrides)


__all__ = ["Job", "load_job", "with_overrides", "HpctrainError"]
