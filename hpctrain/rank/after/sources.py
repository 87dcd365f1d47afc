"""A run's checkpoint and its library's saved config, read as untrusted data.

Anyone who can write in a run directory can put a link, a pipe or a huge file where a checkpoint
or params/agent.yaml should be, and a checkpoint is a pickle. So: every directory below the run
directory is entered without following a link and the file itself must be a regular file, not a
link (records.open_dir + O_NOFOLLOW); sizes are bounded before anything is parsed; the checkpoint
is unpickled only by torch.load(weights_only=True) (tensors, numbers, strings, containers); the
YAML only by PyYAML's safe loader (plus the one tag Isaac Lab writes, a tuple).
"""
from __future__ import annotations

import errno
import os
import re
import stat

from ..records import open_dir, under_root

MAX_CHECKPOINT = 4 << 30  # a policy's checkpoint with its optimizer: far below this
MAX_CONFIG = 1 << 20  # params/agent.yaml (a few KiB)
CONFIG = ("params", "agent.yaml")  # where Isaac Lab and the examples save the agent's config
CONFIG_LEVELS = 2  # the checkpoint's folder and up to two above it (nn/, checkpoints/)


def first_line(exc: BaseException) -> str:
    """An exception's first line, without the terminal colours torch puts in its messages."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]


class ExportError(Exception):
    """What is wrong and how to fix it: the exporter's one refusal (no traceback)."""

    def __init__(self, what: str, fix: str):
        super().__init__(what)
        self.what, self.fix = what, fix


def read_under(run_dir: str, rel: str, limit: int) -> bytes:
    """The bytes of RUN_DIR/rel, a regular file reached through no link, at most `limit`."""
    path = os.path.join(run_dir, rel)
    try:
        root, parts, name = under_root(path, run_dir)
        fd = open_dir(root, parts, create=False)
    except OSError as exc:
        raise ExportError(f"{rel}: {exc}", "name a checkpoint inside the run directory, "
                          "reached through no symbolic link") from None
    try:
        try:
            ffd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
                          | os.O_NOCTTY, dir_fd=fd)
        except OSError as exc:
            why = "a symbolic link" if exc.errno == errno.ELOOP else exc.strerror
            raise ExportError(f"{rel}: {why}", "hpctrain reads only regular files of the run "
                              "directory: restore the file") from None
    finally:
        os.close(fd)
    with os.fdopen(ffd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ExportError(f"{rel}: not a regular file", "restore the file")
        if st.st_size > limit:
            raise ExportError(f"{rel}: {st.st_size} bytes, more than {limit}",
                              "export a checkpoint of a policy, not another file")
        os.set_blocking(f.fileno(), True)
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ExportError(f"{rel}: larger than {limit} bytes", "restore the file")
    return data


def load_checkpoint(run_dir: str, rel: str) -> dict:
    """The checkpoint's dictionary, unpickled with weights_only=True on the CPU."""
    import io

    import torch
    data = read_under(run_dir, rel, MAX_CHECKPOINT)
    try:
        out = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises UnpicklingError, RuntimeError, EOFError, ...
        raise ExportError(f"{rel}: not a checkpoint torch.load(weights_only=True) can read "
                          f"({first_line(exc)})", "export a checkpoint the library saved; hpctrain never "
                          "unpickles arbitrary objects") from None
    if not isinstance(out, dict):
        raise ExportError(f"{rel}: holds a {type(out).__name__}, not a checkpoint's dictionary",
                          "export a checkpoint the library saved")
    return out


def find_config(run_dir: str, checkpoint_rel: str) -> tuple[str, dict]:
    """(where, the agent's config) from the nearest params/agent.yaml at or above the
    checkpoint's folder, inside the run directory."""
    folder = os.path.dirname(os.path.normpath(checkpoint_rel))
    tried = []
    for _ in range(CONFIG_LEVELS + 1):
        rel = os.path.join(folder, *CONFIG) if folder else os.path.join(*CONFIG)
        tried.append(rel)
        try:
            data = read_under(run_dir, rel, MAX_CONFIG)
        except ExportError as exc:
            if os.path.lexists(os.path.join(run_dir, rel)):
                raise exc
        else:
            return rel, parse_yaml(data, rel)
        if not folder:
            break
        folder = os.path.dirname(folder)
    raise ExportError(f"no saved agent config beside the checkpoint (looked for {', '.join(tried)})",
                      "the policy's architecture comes from the config the training saved "
                      "(Isaac Lab's train saves params/agent.yaml in its log folder): save the "
                      "agent's config there as YAML")


def parse_yaml(data: bytes, rel: str) -> dict:
    import yaml

    class Loader(yaml.SafeLoader):
        """The safe loader, plus Isaac Lab's one Python tag (a tuple), read as a list."""

    Loader.add_constructor("tag:yaml.org,2002:python/tuple",
                           lambda loader, node: loader.construct_sequence(node))
    try:
        out = yaml.load(data.decode("utf-8"), Loader=Loader)  # noqa: S506 (a SafeLoader)
    except (UnicodeDecodeError, yaml.YAMLError, RecursionError) as exc:
        raise ExportError(f"{rel}: not YAML the safe loader reads ({str(exc)[:200]})",
                          "restore the file the training saved") from None
    if not isinstance(out, dict):
        raise ExportError(f"{rel}: not a mapping", "restore the file the training saved")
    return out
