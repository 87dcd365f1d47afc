"""The one way hpctrain reads a tool's output (nvidia-smi, dcgmi, scontrol, squeue, sacct, ssh):
bounded in bytes and in time.

A tool's output is untrusted text: a broken driver, a wrapper script or a hostile `nvidia-smi`
earlier on the PATH can print without end. subprocess.run(capture_output=True) would keep all of
it in memory until the machine runs out; here the output is read in chunks as it comes, and a
tool that passes the cap or the timeout is killed (and its process group, where it has one of
its own) at once. Standard library only: the rank side runs it on the nodes, and the submitting
side (backends/commands.py, job/checks.py) runs the same code.
"""
from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from dataclasses import dataclass

MAX_OUTPUT = 16 << 20  # bytes of stdout: far above any answer a cluster's tools give
MAX_ERR = 64 << 10  # bytes of stderr kept (the rest is read and dropped: the tool never blocks)


class ToolOutputTooLarge(OSError):
    """A tool printed more than its cap; it was killed."""

    def __str__(self) -> str:
        return str(self.strerror)


@dataclass
class Completed:
    returncode: int
    stdout: bytes
    stderr: bytes


def run(command: list[str], timeout: float, limit: int = MAX_OUTPUT, input: bytes | None = None,
        **popen) -> Completed:
    """Run `command`; its exit status, stdout (at most `limit` bytes) and stderr (the first
    MAX_ERR bytes). subprocess.TimeoutExpired past `timeout`, ToolOutputTooLarge past `limit`
    (the tool killed either way), OSError when it cannot start (FileNotFoundError: missing)."""
    popen.setdefault("start_new_session", True)  # its children are killed with it
    proc = subprocess.Popen(command, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen)
    out, err = bytearray(), bytearray()
    pending = memoryview(input or b"")
    deadline = time.monotonic() + timeout
    sel = selectors.DefaultSelector()
    try:
        sel.register(proc.stdout, selectors.EVENT_READ, out)
        sel.register(proc.stderr, selectors.EVENT_READ, err)
        if input is not None:
            if pending:
                os.set_blocking(proc.stdin.fileno(), False)
                sel.register(proc.stdin, selectors.EVENT_WRITE, None)
            else:
                proc.stdin.close()
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(command, timeout)
            for key, _ in sel.select(left):
                if key.data is None:  # stdin: as much as the pipe takes now
                    try:
                        pending = pending[os.write(key.fd, pending[:65536]):]
                    except BrokenPipeError:
                        pending = pending[:0]
                    if not pending:
                        sel.unregister(key.fileobj)
                        key.fileobj.close()
                    continue
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                if key.data is out:
                    out += chunk
                    if len(out) > limit:
                        raise ToolOutputTooLarge(0, f"'{command[0]}' printed more than "
                                                    f"{_size(limit)}; stopped it there")
                elif len(err) < MAX_ERR:
                    err += chunk[:MAX_ERR - len(err)]
        left = max(0.0, deadline - time.monotonic())
        try:
            code = proc.wait(timeout=left)
        except subprocess.TimeoutExpired:
            raise subprocess.TimeoutExpired(command, timeout) from None
    except BaseException:
        _kill(proc)
        raise
    finally:
        sel.close()
        for f in (proc.stdin, proc.stdout, proc.stderr):
            if f is not None:
                try:
                    f.close()
                except OSError:
                    pass
    return Completed(code, bytes(out), bytes(err))


def _kill(proc: subprocess.Popen) -> None:
    """The tool and what it started in its session (a wrapper script's children)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        try:
            proc.kill()
        except OSError:
            pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n} bytes"
