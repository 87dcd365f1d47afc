"""The preflight: prove that the job can meet before the program spends minutes starting.

Two levels, both bounded by launcher.preflight_timeout, both naming who did not arrive:

- nodes(): before torchrun, once per node. The head listens on the rendezvous port itself
  (HPCTRAIN_PORT; torchrun binds it only later), so the check covers the very address, port and
  route torchrun will use, and a port already taken on the head is reported as such instead of
  as a 600 s stall. Every node (the head too) connects to HPCTRAIN_HEAD:HPCTRAIN_PORT, retrying
  until the deadline, and says its name; once all nodes of HPCTRAIN_NODES have arrived, the head
  answers each one "ok" — a barrier across the nodes. A node that cannot connect says so (its
  name, the address, the last error); when the time is up the head names the nodes that never
  arrived. Either way the node's part exits non-zero and the batch shell stops the job at once,
  instead of torchrun waiting for its join_timeout and the job hanging until the time limit.
  launch() runs it inside the launch step, in the process that becomes torchrun's agent, while
  that process imports torch (the check is over before the import is); the tasks launcher runs
  it as a step of its own (`rank preflight`).
- rank_check(): in every rank's bootstrap, before the program: every rank torchrun started
  meets every other one, in torchrun's own store (the agent's) or, without one, in a small
  store of rank 0's.
"""
from __future__ import annotations

import os
import re
import socket
import threading
import time

from . import health

from .. import phases
from ..printable import shown

_DRIVER = re.compile(r"[^0-9A-Za-z.,-]")  # what a node may say of its driver version


def _say(text: str) -> None:
    # Into the job's log: node names and nvidia-smi's words are outside text.
    print(f"hpctrain preflight: {shown(text)}", flush=True)


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
    drivers: dict[str, str] = {}  # each node's NVIDIA driver, as its health gate read it
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
                name, _, driver = conn.makefile("r").readline(4096).strip().partition(" ")
            except OSError:
                conn.close()
                continue
            arrived[name] = conn
            drivers[name] = _DRIVER.sub("", driver)[:64]
        missing = [n for n in expected if n not in arrived]
        odd = (health.odd_drivers({n: drivers.get(n, "") for n in expected})
               if not missing else None)
        if odd:
            result["odd"] = odd
        reply = (f"fail: {', '.join(missing)} did not arrive\n".encode() if missing else
                 f"fail: {odd[1]}\n".encode() if odd else b"ok\n")
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


def join(head: str, port: int, me: str, deadline: float, driver: str = "") -> str | None:
    """Connect to the head and wait for the barrier; None on success, else what went wrong.
    `driver`: this node's NVIDIA driver version, which the head compares across the nodes."""
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
            conn.sendall(f"{me} {driver}".rstrip().encode() + b"\n")
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
    from ..records import write_json
    try:
        write_json(os.path.join(run_dir, "status", "preflight.json"),
                   {"nodes": nodes, "message": message, "time": time.time()}, root=run_dir)
    except OSError:
        pass


FAILED_PREFIX = "preflight-failed-"  # status/preflight-failed-NODE.txt: the batch shell's verdict


def _note_failure(me: str, text: str) -> None:
    """What this node says of a failed check, in a file of its own: in the launch step the
    node's output goes to the job's log, not to the batch shell, which reads these files to
    tell a failed check from failed ranks (templates/parts/launch.sh.j2)."""
    run_dir = os.environ.get("HPCTRAIN_RUN_DIR")
    if not run_dir:
        return
    from ..records import write_file
    path = os.path.join(run_dir, "status", f"{FAILED_PREFIX}{me}.txt")
    try:  # atomic: the batch shell reads it whole or not at all; never through a planted link
        write_file(path, (text + "\n").encode("utf-8"), root=run_dir)
    except OSError:
        pass


def _fail(me: str, text: str) -> int:
    _say(text)
    _note_failure(me, text)
    return 1


def _is_head() -> bool:
    """srun numbers a step's nodes (SLURM_NODEID); the ssh backend's steps carry their host's
    index (HPCTRAIN_NODE_INDEX). Node 0 is the head."""
    env = os.environ
    return (env.get("SLURM_NODEID") or env.get("HPCTRAIN_NODE_INDEX")) == "0"


_EARLIER = re.compile(r"trials/[0-9]{4,9}")


def earlier_trial() -> tuple[str, str] | None:
    """A study's trial after the first in its worker's allocation: (the name, the directory) of
    the earlier trial of this allocation whose ranks started on these same nodes, which the
    worker names (HPCTRAIN_NODES_CHECKED=trials/NNNN, search/worker.py). That trial's passed
    health gate and network floor were checks of the allocation's nodes, not of a trial's
    values: they hold for this trial, which records that it relied on them. The node barrier
    (the rendezvous port, every node reaching the head) is run for every trial."""
    by = os.environ.get("HPCTRAIN_NODES_CHECKED", "")
    run_dir = os.environ.get("HPCTRAIN_RUN_DIR")
    if not run_dir or not _EARLIER.fullmatch(by):
        return None
    here = os.path.abspath(run_dir)
    there = os.path.join(os.path.dirname(os.path.dirname(here)), by)
    return (by, there) if there != here else None


def _kept_verdict(me: str) -> dict | None:
    """This node's passed health verdict of the earlier trial (earlier_trial), marked as relied
    on; None when there is none to rely on (the gate then runs)."""
    earlier = earlier_trial()
    if earlier is None:
        return None
    from ..records import read_json
    try:
        old = read_json(health.record_path(earlier[1], me))
    except (OSError, ValueError):
        return None
    if not isinstance(old, dict) or old.get("ok") is not True or old.get("node") != me \
            or not isinstance(old.get("gpus"), list) or old.get("problems"):
        return None
    driver = old.get("driver") if isinstance(old.get("driver"), str) else None
    return {"node": me, "ok": True, "driver": driver, "gpus": old["gpus"], "problems": [],
            "notes": [f"passed in {earlier[0]} on this node in this allocation: not run again"],
            "time": time.time(), "seconds": 0.0, "relied_on": earlier[0]}


def _health_gate(me: str) -> tuple[dict | None, str]:
    """This node's health verdict (rank/before/health.py), recorded in status/health/, and the driver
    version it tells the head (empty: not compared); None when the job has no gate. The gate's
    nvidia-smi calls are bounded by health.timeout."""
    run_dir = os.environ.get("HPCTRAIN_RUN_DIR")
    cfg = health.settings(run_dir) if run_dir else None
    if cfg is None:
        return None, ""
    verdict = _kept_verdict(me) or health.gate(cfg, me)
    health.record(run_dir, verdict)
    for note in verdict["notes"]:
        _say(f"{me}: {note}")
    if verdict["ok"] and not verdict.get("relied_on"):
        _say(f"{me}: health gate passed: {len(verdict['gpus'])} GPU(s), driver "
             f"{verdict['driver'] or '?'}, in {verdict['seconds']:.2f} s")
    return verdict, (verdict["driver"] or "") if cfg.get("same_driver") else ""


def health_only(marks: dict | None = None) -> int:
    """The health gate without the node barrier (a single node, or the node check off): this
    node's exit status, its failure written as the node check's is; `marks` gets the gate's
    seconds (rank/phases.py)."""
    me = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    verdict, _ = _health_gate(me)
    if verdict is not None and not verdict["ok"]:
        return _fail(me, health.summary(verdict))
    if verdict is not None and marks is not None:
        marks["health_s"] = verdict["seconds"]
    return 0


def nodes(timeout: float, marks: dict | None = None) -> int:
    """The node barrier (once per node); returns this node's exit status. `marks` gets when
    the check passed and the health gate's seconds (rank/phases.py)."""
    env = os.environ
    head, port = env["HPCTRAIN_HEAD"], int(env["HPCTRAIN_PORT"])
    expected = [n for n in env.get("HPCTRAIN_NODES", "").split(",") if n]
    me = env.get("SLURMD_NODENAME") or socket.gethostname()
    server = None
    result: dict = {"ready": threading.Event(), "missing": None, "error": None, "odd": None}
    verdict, driver = _health_gate(me)
    if verdict is not None and not verdict["ok"]:
        return _fail(me, health.summary(verdict))
    # The barrier's time starts after the gate, which has bounds of its own (a DCGM diagnostic
    # takes longer than most barriers may).
    start = time.monotonic()
    deadline = start + timeout
    if _is_head():
        server = threading.Thread(target=serve, args=(port, expected, deadline, result),
                                  daemon=True)
        server.start()
        result["ready"].wait()
        if result["error"]:
            _record([me], result["error"])
            return _fail(me, f"{me}: {result['error']}")
    problem = join(head, port, me, deadline, driver)
    if server is not None:
        server.join(max(0.0, deadline - time.monotonic()) + 10)
        if result["odd"]:
            _record(list(result["odd"][0]), result["odd"][1])
            return _fail(me, result["odd"][1])
        if result["missing"]:
            text = (f"{', '.join(result['missing'])} did not reach the head {head}:{port} "
                    f"within {timeout:g} s (preflight_timeout)")
            _record(list(result["missing"]), text)
            return _fail(me, text)
    if problem:
        return _fail(me, f"{me}: {problem} (within {timeout:g} s)")
    if server is not None:
        _say(f"all {len(expected)} nodes reached {head}:{port} in "
             f"{time.monotonic() - start:.2f} s")
        _record([], "passed")
    if marks is not None:
        marks["checked"] = time.time()
        if verdict is not None:
            marks["health_s"] = verdict["seconds"]
    return 0


def _network_floor(marks: dict) -> int:
    """After the node check passed on every node: the network floor where the job sets one
    (rank/before/netfloor.py), this node's exit status. It is part of the node check: its seconds go
    to marks (floor_s), and the check ends (checked) after it."""
    from ..records import bootstrap_section
    run_dir = os.environ.get("HPCTRAIN_RUN_DIR")
    settings = bootstrap_section(run_dir, "netfloor") if run_dir else None
    if not settings or not isinstance(settings.get("min_gbps"), (int, float)):
        return 0
    from . import netfloor
    if _kept_floor(run_dir, float(settings["min_gbps"])):
        marks["floor_s"] = 0.0
        return 0
    start = time.monotonic()
    status = netfloor.run(settings)
    marks["floor_s"] = round(time.monotonic() - start, 3)
    marks["checked"] = time.time()
    if status is None:
        me = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
        return _fail(me, f"{me}: the network floor's all-reduce did not end in time")
    return status


def _kept_floor(run_dir: str, floor: float) -> bool:
    """Whether the earlier trial of this allocation (earlier_trial) measured the network floor
    on these same nodes and it held, at least as high: then it is not measured again (every
    node reads the same record, so all of them skip it or none). The head records it as relied
    on in this trial's status/netfloor.json."""
    from . import netfloor
    earlier = earlier_trial()
    old = netfloor.read(earlier[1]) if earlier is not None else None
    nodes = [x for x in os.environ.get("HPCTRAIN_NODES", "").split(",") if x]
    if not old or old.get("passed") is not True or old.get("nodes") != nodes \
            or not isinstance(old.get("floor_gbps"), (int, float)) or old["floor_gbps"] < floor:
        return False
    if _is_head():
        from ..records import write_json
        try:
            write_json(os.path.join(run_dir, "status", netfloor.RESULT),
                       {**old, "relied_on": earlier[0], "time": time.time()}, root=run_dir)
        except OSError:
            pass
        _say(f"network floor: held in {earlier[0]} on these nodes in this allocation: not "
             "measured again")
    return True


def network_floor(timeout: str, floor: str) -> int:
    """`rank netfloor TIMEOUT FLOOR` (rank/before/netfloor.py), one process per node: measure, judge,
    and (the head) record; exit 0 when the floor holds, else 1 (every node says why: the
    floor, or the measurement itself failed)."""
    from .netfloor import RESULT, measure, verdict
    env = os.environ
    me = env.get("SLURMD_NODENAME") or socket.gethostname()
    nodes = [x for x in env.get("HPCTRAIN_NODES", "").split(",") if x]
    index = int(env.get("SLURM_NODEID") or env.get("HPCTRAIN_NODE_INDEX") or 0)
    try:
        result = measure(index, nodes, env["HPCTRAIN_HEAD"], int(env["HPCTRAIN_SPARE_PORT"]),
                         float(timeout))
    except Exception as exc:  # noqa: BLE001 (torch's collectives raise many kinds)
        text = f"{me}: the network floor's all-reduce failed: {type(exc).__name__}: {exc}"[:2000]
        if _is_head():
            _record([], text)
        return _fail(me, text)
    pairs = {(a, b): gbps for a, b, gbps in result["pairs"]}
    ok, blamed, text = verdict(nodes, result["world_gbps"], pairs, float(floor))
    if _is_head():
        run_dir = env.get("HPCTRAIN_RUN_DIR")
        if run_dir:
            from ..records import write_json
            try:
                write_json(os.path.join(run_dir, "status", RESULT), {
                    **result, "nodes": nodes, "floor_gbps": float(floor), "passed": ok,
                    "blamed": blamed, "message": text, "time": time.time()}, root=run_dir)
            except OSError:
                pass
        if not ok:
            _record(blamed, text)
    if not ok:
        return _fail(me, text)
    if _is_head():
        _say(f"network floor: {text}")
    return 0


def step(timeout: float) -> int:
    """The node check as a step of its own (the tasks launcher: `rank preflight`), before the
    batch shell's set-up is over: of its marks, only the health gate's and the network floor's
    seconds are kept."""
    marks: dict = {}
    status = nodes(timeout, marks)
    if status == 0:
        status = _network_floor(marks)
    kept = {k: marks[k] for k in ("health_s", "floor_s") if k in marks}
    if status == 0 and kept:
        phases.mark(phases.node_file(os.environ.get("SLURMD_NODENAME") or socket.gethostname()),
                    kept)
    return status


def agent(torchrun_args: list[str]) -> int:
    """A node's launch without the node check (a single node, or launcher.preflight off): the
    health gate (where the job has one) while torch's launcher imports, then torchrun's agent
    (ending.run_agent). A node that fails the gate exits 1 before any rank starts."""
    marks: dict = {"launch": time.time()}
    outcome: list[int] = []
    gate = threading.Thread(target=lambda: outcome.append(health_only(marks)), daemon=True)
    gate.start()
    from torch.distributed import run as torchrun  # overlapped with the gate
    marks["imported"] = time.time()
    gate.join()
    if outcome != [0]:
        return 1
    if "health_s" in marks:  # the gate ran: the launch waited for it past the import
        marks["checked"] = time.time()
    phases.mark(phases.node_file(os.environ.get("SLURMD_NODENAME") or socket.gethostname()),
                marks)
    from ..end.ending import run_agent
    return run_agent(torchrun.main, torchrun_args)


def launch(timeout: float, torchrun_args: list[str]) -> int:
    """The launch step's part on one node: the node check, then torchrun's agent, in one
    process. The check runs in a thread while this thread imports torch's launcher (about a
    second of CPU); the check is the shorter of the two, so it costs the launch nothing when
    it passes. It is over, and the head's listener on the rendezvous port closed, before the
    agent binds that port. When it fails, no torchrun starts: the node says why and exits 1.
    A node other than the head waits a few seconds first, so that the head, whose deadline is
    the same, names every missing node before the step's first failure ends the others."""
    marks = {"launch": time.time()}
    outcome: list[int] = []
    check = threading.Thread(target=lambda: outcome.append(nodes(timeout, marks)), daemon=True)
    check.start()
    from torch.distributed import run as torchrun  # overlapped with the check
    marks["imported"] = time.time()
    check.join()
    if outcome == [0]:
        outcome = [_network_floor(marks)]
    if not outcome or outcome[0] != 0:
        if not _is_head():
            time.sleep(5)
        return 1
    me = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    phases.mark(phases.node_file(me), marks)
    # As `python -m torch.distributed.run ARGS` would (its errors, its exit status), a signal
    # sent to it taken as an ending (rank/end/ending.py: one line, 128+N, no traceback).
    from ..end.ending import run_agent
    return run_agent(torchrun.main, torchrun_args)


# ----------------------------------------------------------------------------- ranks

class RankCheckError(RuntimeError):
    """Not every rank arrived at the preflight's rank check in time."""


def rank_check(me, timeout: float) -> float:
    """The preflight's tiny collective: every rank of this attempt meets every other one.

    The node barrier (nodes() above) proves that the nodes reach the head; this proves
    that every rank torchrun started is alive and reaches the store the job meets in, before
    the program spends minutes building its environments. It must not create torch's process
    group (the program or its library does, and a second init fails), so it is a counter in a
    store: every rank adds 1 and waits until the count is WORLD_SIZE. A rank that does not
    arrive within `timeout` (launcher.preflight_timeout) is named, with its node where a rank
    of the same node arrived. Returns the seconds spent (waiting for the slowest rank
    included, torch's import not).

    The store is torchrun's own where its agent shares it with the ranks
    (TORCHELASTIC_USE_AGENT_STORE: MASTER_ADDR:MASTER_PORT, served by the first node's agent),
    the one every rank's init_process_group connects to a moment later: nothing to start, and
    the very connection the program needs next is proven. Keys live under
    hpctrain/rank-check/RESTART/, so a torchrun restart meets afresh. Otherwise rank 0 hosts a
    small TCPStore on HPCTRAIN_SPARE_PORT of its node for the check alone (_meet_in_own_store).
    """
    # Only torchrun jobs get here, whose program imports torch anyway: the import is not extra.
    env = os.environ
    if env.get("TORCHELASTIC_USE_AGENT_STORE") == "True" and env.get("MASTER_PORT"):
        return _meet_in_agent_store(me, timeout)
    return _meet_in_own_store(me, timeout)


def _meet_in_agent_store(me, timeout: float) -> float:
    """The check in torchrun's store. When a rank is missing, every rank that arrived gives the
    same verdict (the first to write it), and those of the first node leave last: their
    failure ends that node's torchrun, and the store with it, while a rank of another node may
    still be reading the verdict (seen in CI: "lost torchrun's store" for one rank). The
    deadline is the first arrival's, so that the ranks give up together."""
    import datetime as _dt
    from torch.distributed import TCPStore

    start = time.monotonic()
    env, rank, world = os.environ, me.rank, me.world_size
    host, port = env["MASTER_ADDR"], int(env["MASTER_PORT"])
    prefix = f"hpctrain/rank-check/{env.get('TORCHELASTIC_RESTART_COUNT', '0')}/"
    try:
        store = TCPStore(host, port, is_master=False, timeout=_dt.timedelta(
            seconds=max(1.0, timeout)), wait_for_workers=False)
    except Exception as exc:  # noqa: BLE001 (the store raises several kinds)
        raise RankCheckError(f"rank {rank} on {me.node} cannot reach torchrun's store "
                             f"{host}:{port} within {timeout:g} s: {exc}") from None
    try:
        store.set(f"{prefix}rank/{rank}", me.node)
        deadline = _common_deadline(store, f"{prefix}deadline", start, timeout)
        if store.add(f"{prefix}arrived", 1) == world:
            store.set(f"{prefix}all", "1")  # the last to arrive lets everyone go at once
        try:
            left = _dt.timedelta(seconds=max(0.001, deadline - time.monotonic()))
            store.wait([f"{prefix}all"], left)
        except Exception:  # noqa: BLE001 (a timeout, or the store lost: told apart below)
            if not store.check([f"{prefix}all"]):
                verdict = store.compare_set(f"{prefix}verdict", "",
                                            _missing_ranks(store, me, timeout, prefix)).decode()
                gone = store.add(f"{prefix}left", 1)
                if env.get("GROUP_RANK") == "0":  # this node's torchrun serves the store
                    everyone = max(gone, store.add(f"{prefix}arrived", 0))
                    _wait_count(store, f"{prefix}left", everyone, time.monotonic() + 5)
                raise RankCheckError(verdict) from None
    except RankCheckError:
        raise
    except Exception as exc:  # noqa: BLE001 (the store lost: the agent on the head died)
        raise RankCheckError(f"rank {rank} on {me.node} lost torchrun's store {host}:{port} "
                             f"during the rank check: {exc}") from None
    finally:
        del store
    return time.monotonic() - start


def _common_deadline(store, key: str, start: float, timeout: float) -> float:
    """This rank's deadline (monotonic) from the first arrival's (epoch seconds, in the store),
    never before its own start nor after its own start + timeout (clocks of nodes differ)."""
    now_epoch, now = time.time(), time.monotonic()
    first = store.compare_set(key, "", f"{now_epoch + timeout - (now - start):.3f}").decode()
    try:
        at = float(first)
    except ValueError:
        at = now_epoch + timeout
    return min(max(start, now + (at - now_epoch)), start + timeout)


def _meet_in_own_store(me, timeout: float) -> float:
    """Rank 0 hosts the check's store on HPCTRAIN_SPARE_PORT; it leaves last, once every rank
    has seen the full count. The store is gone before the program starts."""
    import datetime as _dt
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


def _missing_ranks(store, me, timeout: float, prefix: str = "") -> str:
    world, lws = me.world_size, max(1, me.local_world_size)
    present = {r: store.get(f"{prefix}rank/{r}").decode() for r in range(world)
               if store.check([f"{prefix}rank/{r}"])}

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
