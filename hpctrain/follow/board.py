"""`hpctrain tensorboard RUN`: TensorBoard on everything a run (every attempt, every sweep task)
wrote, and how to reach it from a laptop.

TensorBoard is given the run directory itself: it finds the event files of every attempt and every
sweep task below it (each folder with event files is one of its "runs"), including those
written after it started. It listens on 127.0.0.1 only; the way in from a laptop is an ssh
port forward to this machine (the login node), printed ready to paste.
"""
from __future__ import annotations

import getpass
import os
import socket
from dataclasses import dataclass

from .curves import event_files
from ..errors import HpctrainError
from ..runs.records import Run


@dataclass
class Board:
    url: str
    port: int
    logdir: str
    directories: list[str]  # the folders holding event files when it started, relative
    forward: str  # the ssh command to run on the laptop


def event_directories(run: Run) -> list[str]:
    """Folders under the run (its tasks' included) that hold event files, relative to it."""
    found = {os.path.dirname(p) for p in event_files(str(run.path))}
    return sorted(os.path.relpath(d, run.path) for d in found)


def this_host() -> str:
    """The name a laptop reaches this machine by: its fully qualified name where it has one
    (login nodes behind one alias each have their own), else its host name."""
    fqdn = socket.getfqdn()
    return fqdn if fqdn and not fqdn.startswith("localhost") else socket.gethostname()


def forward_line(port: int, host: str | None = None, user: str | None = None) -> str:
    return f"ssh -N -L {port}:127.0.0.1:{port} {user or getpass.getuser()}@{host or this_host()}"


def start(run: Run, port: int | None = None, reload_s: int = 5) -> tuple[Board, object]:
    """Start TensorBoard in this process (its server runs in a thread); returns what it
    serves and the TensorBoard program object. The caller keeps the process alive."""
    try:
        from tensorboard import program
    except ImportError:
        raise HpctrainError("`hpctrain tensorboard` needs the tensorboard package",
                            fix="pip install 'hpctrain[watch]' (tensorboard and matplotlib)") from None
    if port is not None and not 0 < port < 65536:
        raise HpctrainError(f"no port {port}", fix="give a --port from 1 to 65535 (default: 6006 or "
                            "the next free one)")
    # --load_fast=false: TensorBoard's own Python loader, in this process. The "fast" one is a
    # separate binary TensorBoard still calls experimental (and announces as such at start).
    argv = [None, "--logdir", str(run.path), "--host", "127.0.0.1",
            "--reload_interval", str(reload_s), "--load_fast=false"]
    if port is not None:  # otherwise TensorBoard takes 6006 or the next free port after it
        argv += ["--port", str(port)]
    tb = program.TensorBoard()
    try:
        tb.configure(argv=argv)
        url = tb.launch()
    except (program.TensorBoardServerException, OSError) as exc:
        raise HpctrainError(f"TensorBoard could not start: {exc}",
                            fix="choose another --port (one that is free on this machine)") from None
    bound = int(url.rstrip("/").rsplit(":", 1)[1])
    return Board(url=url, port=bound, logdir=str(run.path), directories=event_directories(run),
                 forward=forward_line(bound)), tb
