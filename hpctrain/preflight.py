"""Rendezvous preflight: before torchrun starts, prove that every node reaches the head.

Standard library only; copied into the run directory and run by the batch shell as one Slurm
step, one task per node (templates/parts/preflight.sh.j2):

    srun --ntasks-per-node=1 ... python RUN_DIR/preflight.py TIMEOUT

The head's task listens on the rendezvous port itself (HPCTRAIN_PORT; torchrun binds it only
later), so the check covers the very address, port and route torchrun will use, and a port
already taken on the head is reported as such instead of as a 600 s stall. Every node's task
(the head's too) connects to HPCTRAIN_HEAD:HPCTRAIN_PORT, retrying until TIMEOUT, and says its
name; once all nodes of HPCTRAIN_NODES have arrived, the head answers each one "ok" — a barrier
across the nodes. A node that cannot connect says so (its name, the address, the last error);
when the time is up the head names the nodes that never arrived. Either way the step exits
non-zero and the batch shell stops the job at once, instead of torchrun waiting for its
join_timeout and the job hanging until the time limit.
"""
from __future__ import annotations

import os
import socket
import sys
import threading
import time


def _say(text: str) -> None:
    print(f"hpctrain preflight: {text}", flush=True)


def serve(port: int, expected: list[str], deadline: float, result: dict) -> None:
    try:
        srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        # torchrun binds this port right after us: leave no TIME_WAIT claim on it.
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("", port))
        srv.listen(len(expected) + 8)
    except OSError as exc:
        result["error"] = (f"the head cannot listen on the rendezvous port {port}: {exc} "
                           "(another job or process holds it? set the site's port rule)")
        result["ready"].set()
        return
    result["ready"].set()
    arrived: dict[str, socket.socket] = {}
    try:
        while set(expected) - set(arrived):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            srv.settimeout(left)
            try:
                conn, _ = srv.accept()
            except socket.timeout:
                break
            conn.settimeout(max(1.0, deadline - time.monotonic()))
            try:
                name = conn.makefile("r").readline().strip()
            except OSError:
                conn.close()
                continue
            arrived[name] = conn
        missing = [n for n in expected if n not in arrived]
        reply = (b"ok\n" if not missing else
                 f"fail: {', '.join(missing)} did not arrive\n".encode())
        for conn in arrived.values():
            try:
                conn.sendall(reply)
                conn.settimeout(5)
                conn.recv(1)  # the client closes first: TIME_WAIT stays on its side
            except OSError:
                pass
            conn.close()
        result["missing"] = missing
    finally:
        srv.close()


def join(head: str, port: int, me: str, deadline: float) -> str | None:
    """Connect to the head and wait for the barrier; None on success, else what went wrong."""
    last = "no attempt"
    while time.monotonic() < deadline:
        try:
            conn = socket.create_connection((head, port), timeout=max(0.5, min(
                5.0, deadline - time.monotonic())))
        except OSError as exc:
            last = str(exc)
            time.sleep(0.2)  # the head's listener may not be up yet
            continue
        try:
            conn.settimeout(max(1.0, deadline - time.monotonic() + 5))
            conn.sendall(f"{me}\n".encode())
            answer = conn.makefile("r").readline().strip()
        except OSError as exc:
            return f"connected to {head}:{port} but the barrier failed: {exc}"
        finally:
            conn.close()
        return None if answer == "ok" else (answer or "the head closed the connection")
    return f"cannot reach the head {head}:{port}: {last}"


def main(args: list[str]) -> int:
    timeout = float(args[0]) if args else 60.0
    env = os.environ
    head, port = env["HPCTRAIN_HEAD"], int(env["HPCTRAIN_PORT"])
    expected = [n for n in env.get("HPCTRAIN_NODES", "").split(",") if n]
    me = env.get("SLURMD_NODENAME") or socket.gethostname()
    start = time.monotonic()
    deadline = start + timeout
    server = None
    result: dict = {"ready": threading.Event(), "missing": None, "error": None}
    if env.get("SLURM_NODEID") == "0":
        server = threading.Thread(target=serve, args=(port, expected, deadline, result),
                                  daemon=True)
        server.start()
        result["ready"].wait()
        if result["error"]:
            _say(f"{me}: {result['error']}")
            return 1
    problem = join(head, port, me, deadline)
    if server is not None:
        server.join(max(0.0, deadline - time.monotonic()) + 10)
        if result["missing"]:
            _say(f"{', '.join(result['missing'])} did not reach the head {head}:{port} "
                 f"within {timeout:g} s (preflight_timeout)")
            return 1
    if problem:
        _say(f"{me}: {problem} (within {timeout:g} s)")
        return 1
    if server is not None:
        _say(f"all {len(expected)} nodes reached {head}:{port} in "
             f"{time.monotonic() - start:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
