"""Which Isaac Lab a job runs, read from its install at load time — never by importing it here.

`isaaclab:` names one of three shapes of install on the nodes:

- a checkout (`isaaclab.sh` beside `source/`): its VERSION file says the release; the
  interpreter is `isaaclab.sh -p`;
- an environment (a pip/uv venv or conda prefix): the `isaaclab-<version>.dist-info` folder in its
  site-packages says the release; the interpreter is its `bin/python`;
- an interpreter (`/opt/venv/bin/python3.12`): the packages of its own prefix (a venv, a conda
  environment, /usr/local). It is never run: a job file is untrusted, and validating one must not
  start a program it names.

What is found fills `isaaclab_version` (and `python`, when the job gives none), so that the
library adapters build that generation's command (libraries/isaaclab.py) from the job alone. An
install that cannot be read here (a container's image, a path only the nodes have) keeps
`isaaclab_version` as the job or the image tag says, else 2.x, with a warning naming the key.

The same read lists the tasks the install registers (`gym.register(id=...)` in the task packages'
`__init__.py` files, where Isaac Lab keeps them), so that a task name from another release
(`Isaac-Cartpole-v0` on 3.0, which calls it `Isaac-Cartpole`) is one error at load, not a
traceback on every rank after the queue.
"""
from __future__ import annotations

import glob
import os
import re
import shlex
from typing import NamedTuple

import msgspec

from ..errors import HpctrainError, nearest
from ..runs.untrusted import read_text
from ..libraries.isaaclab import generation
from ..schema.spec import JobSpec

# Reads are bounded: an install is the user's, but a path may point anywhere.
_MAX_FILES = 4000
_MAX_READ = 1 << 20
_VERSION = re.compile(r"[0-9]+(\.[0-9]+){0,3}([.+-]?[A-Za-z0-9]+)*")
_TASK_ID = re.compile(r"""\bid\s*=\s*["']([A-Za-z0-9][A-Za-z0-9_.:-]*)["']""")
_DIST_INFO = re.compile(r"isaaclab-([0-9][^-/]*)\.(dist|egg)-info\Z")
_IMAGE_TAG = re.compile(r"isaac-?lab[^:/]*:v?([0-9]+\.[0-9]+(\.[0-9]+)?)")


class Install(NamedTuple):
    kind: str  # checkout | environment | interpreter
    path: str  # what the job named
    version: str  # e.g. 3.0.0
    python: list[str]  # the interpreter command for the ranks
    tasks: frozenset[str]  # the task ids the install registers (empty: none could be read)
    external_tasks: bool  # other packages register tasks through entry points: not all are seen

    @property
    def generation(self) -> int:
        return generation(self.version)

    def describe(self) -> str:
        return f"Isaac Lab {self.version} ({self.kind} {self.path})"


def _read(path: str, limit: int = _MAX_READ) -> str:
    """A regular file's text (runs/untrusted.py's bounded read); '' when it is not one."""
    try:
        return read_text(path, limit)
    except OSError:
        return ""


def _task_ids(package_dirs: list[str]) -> frozenset[str]:
    ids: set[str] = set()
    seen = 0
    for top in package_dirs:
        for root, dirs, files in os.walk(top):
            dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__")))
            if "__init__.py" not in files:
                continue
            seen += 1
            if seen > _MAX_FILES:
                return frozenset(ids)
            ids.update(_TASK_ID.findall(_read(os.path.join(root, "__init__.py"))))
    return frozenset(ids)


def _external_tasks(site_packages: str) -> bool:
    for path in glob.glob(os.path.join(glob.escape(site_packages), "*.dist-info", "entry_points.txt"))[:_MAX_FILES]:
        if "isaaclab" in os.path.basename(os.path.dirname(path)):
            continue
        if "[isaaclab.tasks]" in _read(path, 65536):
            return True
    return False


def _from_site_packages(kind: str, path: str, site_packages: str, python: list[str]) -> Install | None:
    for entry in sorted(os.listdir(site_packages)) if os.path.isdir(site_packages) else []:
        m = _DIST_INFO.match(entry)
        if m:
            tasks = _task_ids(sorted(glob.glob(os.path.join(glob.escape(site_packages), "isaaclab_tasks*"))))
            return Install(kind, path, m.group(1), python, tasks, _external_tasks(site_packages))
    return None


def _site_packages_of(prefix: str) -> list[str]:
    # venvs and conda: lib/python3.X/site-packages; Debian's pythons: dist-packages
    found = []
    for lib in ("lib", os.path.join("local", "lib")):
        for name in ("site-packages", "dist-packages"):
            found += glob.glob(os.path.join(glob.escape(prefix), lib, "python3*", name))
    return sorted(found)


def _checkout(path: str) -> Install | None:
    if not os.path.isfile(os.path.join(path, "isaaclab.sh")):
        return None
    text = _read(os.path.join(path, "VERSION"), 200).strip()
    m = _VERSION.match(text)
    if m:
        version = m.group(0)
    elif os.path.isfile(os.path.join(path, "source", "isaaclab_rl", "isaaclab_rl", "entrypoints",
                                      "dispatch.py")):
        version = "3"  # the one CLI's dispatcher exists since 3.0
    else:
        version = "2"
    tasks = _task_ids(sorted(glob.glob(os.path.join(glob.escape(path), "source", "isaaclab_tasks*"))))
    return Install("checkout", path, version, [os.path.join(path, "isaaclab.sh"), "-p"], tasks,
                   False)


def _environment(path: str) -> Install | None:
    python = next((os.path.join(path, "bin", n) for n in ("python", "python3")
                   if os.path.isfile(os.path.join(path, "bin", n))), None)
    if python is None:
        return None
    for sp in _site_packages_of(path):
        found = _from_site_packages("environment", path, sp, [python])
        if found:
            return found
    return None


def _interpreter(path: str) -> Install | None:
    # Its own prefix (a venv, a conda env, /usr/local): never run, only read. A job file is
    # untrusted: validating one must not start a program it names.
    prefix = os.path.dirname(os.path.dirname(os.path.abspath(path)))
    for sp in _site_packages_of(prefix):
        found = _from_site_packages("interpreter", path, sp, [path])
        if found:
            return found
    return None


def find_install(path: str) -> Install | None:
    """The Isaac Lab install at `path` on this machine, or None when none can be read there."""
    if not path or not os.path.isabs(path) or not os.path.exists(path):
        return None
    if os.path.isdir(path):
        return _checkout(path) or _environment(path)
    return _interpreter(path) if os.path.isfile(path) else None


def describe_release(spec: JobSpec) -> str:
    """For validate: the release, where it was read, and which command shape follows."""
    install = None if spec.container is not None else find_install(spec.isaaclab or "")
    where = install.describe() if install else f"Isaac Lab {spec.isaaclab_version} (isaaclab_version)"
    shape = ("one CLI: python -m isaaclab train" if generation(spec.isaaclab_version) >= 3
             else "2.x: the library's train.py")
    return f"{where}; {shape}"


# ------------------------------------------------------------------------------ the job's side

# 2.x's per-library train.py flags that 3.0's one CLI rejects or no longer has, and what replaces them.
GONE_IN_3 = {
    "--headless": "3.0 runs headless by default (--viz opts in): leave --headless out",
    "--resume": "3.0 resumes with --checkpoint FILE|DIR|latest|best; hpctrain passes the newest "
                "checkpoint's file itself on a restart: leave --resume out",
    "--load_run": "3.0 has no --load_run: give --checkpoint the run's folder or file",
}


def _flag(arg: str) -> str:
    return arg.split("=", 1)[0]


def resolve(spec: JobSpec, where, runs_isaaclab: bool) -> tuple[JobSpec, list[str], Install | None]:
    """The job with the Isaac Lab release (and interpreter) its install says; the warnings; the
    install found. Jobs that do not run Isaac Lab's own training come back as they are."""
    if not runs_isaaclab or not spec.isaaclab:
        return spec, [], None
    warnings: list[str] = []
    install = None if spec.container is not None else find_install(spec.isaaclab)
    changes: dict = {}
    if install is not None:
        if spec.isaaclab_version and generation(spec.isaaclab_version) != install.generation:
            raise HpctrainError(
                f"isaaclab_version is {spec.isaaclab_version}, but {install.describe()} is "
                f"release {install.version}", where(("isaaclab_version",)),
                f"remove isaaclab_version (it is read from the install), or point isaaclab: at "
                f"the {spec.isaaclab_version} install")
        changes["isaaclab_version"] = install.version
        if spec.python is None:
            changes["python"] = shlex.join(install.python)
    elif not spec.isaaclab_version:
        tag = _IMAGE_TAG.search(spec.container.image) if spec.container is not None else None
        if tag:
            changes["isaaclab_version"] = tag.group(1)
        else:
            place = "inside the container's image" if spec.container is not None else "on this machine"
            warnings.append(
                f"{where(('isaaclab',))}: no Isaac Lab install could be read at {spec.isaaclab} "
                f"{place}: the job is launched as Isaac Lab 2.x (per-library train.py). For 3.0, "
                "set isaaclab_version: 3.0.0")
    if changes:
        spec = msgspec.structs.replace(spec, **changes)
    if generation(spec.isaaclab_version) >= 3:
        _check_3(spec, where, install)
    if install is not None and install.tasks and spec.task:
        _check_task(spec, where, install, warnings)
    return spec, warnings, install


def _check_3(spec: JobSpec, where, install: Install | None) -> None:
    release = spec.isaaclab_version
    for i, arg in enumerate(spec.args):
        flag = _flag(str(arg))
        if flag in GONE_IN_3:
            raise HpctrainError(
                f"'{arg}' is a 2.x train.py flag: Isaac Lab {release}'s `isaaclab train` rejects "
                "it (unrecognized arguments)", where(("args", i)), GONE_IN_3[flag])
    if spec.script is not None:
        raise HpctrainError(
            f"'script: {spec.script}' is Isaac Lab 2.x's per-library train.py; Isaac Lab "
            f"{release} trains through its one CLI (`isaaclab train --rl_library ...`) and a "
            "pip/uv install has no scripts/ folder", where(("script",)),
            "remove script: hpctrain runs `python -m isaaclab train` with the job's library "
            "(or set library: command to run your own program)")


def _check_task(spec: JobSpec, where, install: Install, warnings: list[str]) -> None:
    task = spec.task.split(":")[-1]
    if task in install.tasks:
        return
    close = nearest(task, install.tasks) or nearest(re.sub(r"-v[0-9]+\Z", "", task), install.tasks)
    hint = f"did you mean {close}?" if close else "`isaaclab list_envs` lists them"
    what = f"task '{spec.task}' is not registered by {install.describe()}"
    if install.external_tasks:  # another package registers tasks we cannot read without importing it
        warnings.append(f"{where(('task',))}: {what} (other installed packages register tasks "
                        f"too; {hint})")
        return
    raise HpctrainError(what, where(("task",)), hint)


__all__ = ["Install", "find_install", "generation", "resolve", "GONE_IN_3"]
