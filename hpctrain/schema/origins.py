"""Where each value of a loaded job came from, so that an error can point at it.

A job is merged from the site profile's `defaults:`, the job file (or a dict from Python),
`--set` arguments and a few environment variables; an error about a key names the place the
user must edit: `job.yaml:7`, `--set resources.nodes=x`, `$HPCTRAIN_RUNS_DIR`, or
`sites/lab.yaml:12 (site 'lab' defaults)`.
"""
from __future__ import annotations

from .yamlfile import Located


class Origins:
    """`origins(path)`: where a job key path came from; `origins.site(path)`: a site key's."""

    def __init__(self, job: Located, site: Located, site_name: str,
                 set_args: dict[tuple, str] | None = None, env_keys: dict[tuple, str] | None = None,
                 site_from: str | None = None, flags: dict[tuple, str] | None = None):
        self.job, self.site_doc, self.site_name = job, site, site_name
        self.set_args = set_args or {}  # key path -> the --set argument that gave it
        self.flags = flags or {}  # key path -> the command-line option that gave it (--after X)
        self.env_keys = env_keys or {}  # key path -> the environment variable that gave it
        self.site_from = site_from  # how the site was chosen, when not by the job or --site

    def __call__(self, path: tuple = ()) -> str:
        path = tuple(path)
        for n in range(len(path), 0, -1):
            if path[:n] in self.flags:
                return self.flags[path[:n]]
        for n in range(len(path), 0, -1):
            if path[:n] in self.set_args:
                return f"--set {self.set_args[path[:n]]}"
        # A --set below this key made it (an unknown `--set foo.bar=1`) or changed its type
        # (`--set name.x=1` turns a name into a mapping): that argument is what to fix.
        below = [k for k in self.set_args if path and k[:len(path)] == path]
        if below:
            return f"--set {self.set_args[below[0]]}"
        for n in range(len(path), 0, -1):
            if path[:n] in self.env_keys:
                return f"${self.env_keys[path[:n]]}"
        if not path or path[0] in self.job:
            return self.job.where(path)
        defaults = ("defaults",) + path
        if self.site_doc.has(defaults[:2]):
            return f"{self.site_doc.where(defaults)} (site '{self.site_name}' defaults)"
        return self.job.source

    def site(self, path: tuple = ()) -> str:
        where = self.site_doc.where(tuple(path))
        return f"{where} (site '{self.site_name}', {self.site_from})" if self.site_from else where
