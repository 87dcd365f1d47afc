"""The preflight: prove that the job can meet before the program spends minutes starting.

Two levels, both bounded by launcher.preflight_timeout, both naming who did not arrive:

- nodes(): before torchrun, one task per node (the batch shell's preflight step). The head's
  task listens on the rendezvous port itself (HPCTRAIN_PORT; torchrun binds it only later), so
  the check covers the very address, port and route torchrun will use, and a port already taken
  on the head is reported as such instead of as a 600 s stall. Every node's task (the head's
  too) connects to HPCTRAIN_HEAD:HPCTRAIN_PORT, retrying until the deadline, and says its name;
  once all nodes of HPCTRAIN_NODES have arrived, the head answers each one "ok" — a barrier
  across the nodes. A node that cannot connect says so (its name, the address, the last error);
  when the time is up the head names the nodes that never arrived. Either way the step exits
  non-zero and the batch shell stops the job at once, instead of torchrun waiting for its
  join_timeout and the job hanging until the time limit.
- rank_check(): in every rank's bootstrap, before the program: every rank torchrun started
  meets every other one in a small store of rank 0's.
"""
from __future__ import annotations

import os
import socket
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


def _record(nodes: list[str], message: str) -> None:
    """status/preflight.json: the nodes the preflight blames (none when it passed), for
    status/failure.json and the requeue that leaves them out (recovery.py)."""
    run_dir = os.environ.get("HPCTRAIN_RUN_DIR")
    if not run_dir:
        return
    from .records import write_json
    try:
        os.makedirs(os.path.join(run_dir, "status"), exist_ok=True)
        write_json(os.path.join(run_dir, "status", "preflight.json"),
                   {"nodes": nodes, "message": message, "time": time.time()})
    except OSError:
        pass


def nodes(timeout: float) -> int:
    """The node barrier (one task per node); returns the step's exit status."""
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
            _record([me], result["error"])
            return 1
    problem = join(head, port, me, deadline)
    if server is not None:
        server.join(max(0.0, deadline - time.monotonic()) + 10)
        if result["missing"]:
            text = (f"{', '.join(result['missing'])} did not reach the head {head}:{port} "
                    f"within {timeout:g} s (preflight_timeout)")
            _say(text)
            _record(list(result["missing"]), text)
            return 1
    if problem:
        _say(f"{me}: {problem} (within {timeout:g} s)")
        return 1
    if server is not None:
        _say(f"all {len(expected)} nodes reached {head}:{port} in "
             f"{time.monotonic() - start:.2f} s")
        _record([], "passed")
    return 0


# ----------------------------------------------------------------------------- ranks

class RankCheckError(RuntimeError):
    """Not every rank arrived at the preflight's rank check in time."""


def rank_check(me, timeout: float) -> float:
    """The preflight's tiny collective: every rank of this attempt meets every other one.

    The node barrier (nodes() above) proves that the nodes reach the head; this proves
    that every rank torchrun started is alive and reaches rank 0's node, before the program
    spends minutes building its environments. It must not create torch's process group (the
    program or its library does, and a second init fails), so it is a counter in a small
    TCPStore of its own: rank 0 hosts it on HPCTRAIN_SPARE_PORT of its node (MASTER_ADDR,
    which torchrun gives every rank), every rank adds 1 and waits until the count is WORLD_SIZE.
    A rank that does not arrive within `timeout` (launcher.preflight_timeout) is named, with
    its node where a rank of the same node arrived. The store is gone before the program
    starts; a torchrun restart runs the check again with a new store. Returns the seconds spent
    (waiting for the slowest rank included, torch's import not).
    """
    import datetime as _dt
    # Only torchrun jobs get here, whose program imports torch anyway: the import is not extra.
    from torch.distributed import TCPStore

    start = time.monotonic()
    env, rank, world = os.environ, me.rank, me.world_size
    host, port = env["MASTER_ADDR"], int(env["HPCTRAIN_SPARE_PORT"])
    deadline = start + timeout
    limit = _dt.timedelta(seconds=max(1.0, timeout))
    try:
        store = TCPStore(host, port, world_size=None, is_master=rank == 0, timeout=limit,
                         wait_for_workers=False)
    except Exception as exc:  # noqa: BLE001 (the store raises several kinds)
        raise RankCheckError(f"rank {rank} on {me.node} cannot reach rank 0's check store "
                             f"{host}:{port} (HPCTRAIN_SPARE_PORT) within {timeout:g} s: {exc}"
                             ) from None
    try:
        store.set(f"rank/{rank}", me.node)
        arrived = store.add("arrived", 1)
        while arrived < world and time.monotonic() < deadline:
            time.sleep(0.05)
            arrived = store.add("arrived", 0)
        if arrived < world:
            # Rank 0 names the missing ranks once for everyone and leaves last, so that no rank
            # reports its store vanishing instead of the real reason.
            if rank == 0:
                verdict = _missing_ranks(store, me, timeout)
                store.set("verdict", verdict)
                _wait_count(store, "left", arrived - 1, time.monotonic() + 5)
                raise RankCheckError(verdict)
            if _wait_key(store, "verdict", time.monotonic() + 5):
                verdict = store.get("verdict").decode()
                store.add("left", 1)
                raise RankCheckError(verdict)
            raise RankCheckError(_missing_ranks(store, me, timeout))
        # Rank 0 hosts the store: it leaves last, once every rank has seen the full count.
        store.add("left", 1)
        if rank == 0:
            _wait_count(store, "left", world, time.monotonic() + 5)
    except RankCheckError:
        raise
    except Exception as exc:  # noqa: BLE001 (the store lost: rank 0 died or left)
        raise RankCheckError(f"rank {rank} on {me.node} lost rank 0's check store "
                             f"{host}:{port} during the rank check: {exc}") from None
    finally:
        del store
    return time.monotonic() - start


def _missing_ranks(store, me, timeout: float) -> str:
    world, lws = me.world_size, max(1, me.local_world_size)
    present = {r: store.get(f"rank/{r}").decode() for r in range(world)
               if store.check([f"rank/{r}"])}

    def where(r: int) -> str:  # torchrun numbers one node's ranks contiguously
        peers = [present[p] for p in range(r - r % lws, r - r % lws + lws) if p in present]
        return f"rank {r} ({peers[0]})" if peers else f"rank {r} (node unknown)"
    missing = [where(r) for r in range(world) if r not in present]
    return (f"{', '.join(missing)} did not reach the rank check within {timeout:g} s "
            f"(launcher.preflight_timeout); {len(present)} of {world} ranks arrived")


def _wait_count(store, key: str, target: int, until: float) -> None:
    while store.add(key, 0) < target and time.monotonic() < until:
        time.sleep(0.02)


def _wait_key(store, key: str, until: float) -> bool:
    while not store.check([key]):
        if time.monotonic() >= until:
            return False
        time.sleep(0.05)
    return True
