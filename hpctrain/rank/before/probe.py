"""What a node says about itself, and whether another node can reach it: the evidence that
`hpctrain site detect` (detect.py) and `hpctrain doctor` (doctor.py) decide from.

    facts [--resolve NAME ...] [--writable DIR] [--torch] [--assets ROOT]
                                                             one JSON line about this node
    reach HEAD FACTS.jsonl PORT WINDOW                       can this node reach HEAD on PORT?
    gate HEAD FACTS.jsonl NODES                              exit 1 naming what would fail a launch

Standard library only (it runs on the nodes, under whatever interpreter the job uses).
Interfaces come from the kernel of the node's own network namespace (if_nameindex + ioctl),
never from /sys/class/net, which a container or a network namespace may show from its host.
Nothing here decides anything: it reports, and the deciding side explains.
"""
from __future__ import annotations

import errno
import fcntl
import glob
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import time

from .. import tools

_SIOCGIFFLAGS, _SIOCGIFADDR, _SIOCGIFNETMASK = 0x8913, 0x8915, 0x891B
_IFF_UP, _IFF_LOOPBACK = 0x1, 0x8

# Names an InfiniBand (or other fast-network) hostname is commonly made of, tried after the
# node's own name: node12-ib, node12i (JSC), node12-ib0, node12.ib, node12-hsn0 (HPE Slingshot).
SUFFIXES = ("-ib", "i", "-ib0", ".ib", "-hsn0", "-opa")


def node_name() -> str:
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def _ioctl_addr(sock, name: str, request: int) -> str | None:
    try:
        packed = fcntl.ioctl(sock.fileno(), request, struct.pack("256s", name.encode()[:15]))
    except OSError:
        return None
    return socket.inet_ntoa(packed[20:24])


def interfaces() -> list[dict]:
    """This network namespace's interfaces: name, up, loopback, its (primary) IPv4 and prefix."""
    out = []
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for _, name in socket.if_nameindex():
            try:
                flags = struct.unpack("H", fcntl.ioctl(sock.fileno(), _SIOCGIFFLAGS, struct.pack(
                    "256s", name.encode()[:15]))[16:18])[0]
            except OSError:
                flags = 0
            addr = _ioctl_addr(sock, name, _SIOCGIFADDR)
            mask = _ioctl_addr(sock, name, _SIOCGIFNETMASK)
            prefix = bin(struct.unpack("!I", socket.inet_aton(mask))[0]).count("1") if mask else None
            out.append({"name": name, "up": bool(flags & _IFF_UP),
                        "loopback": bool(flags & _IFF_LOOPBACK), "ipv4": addr, "prefix": prefix})
    finally:
        sock.close()
    return out


def infiniband() -> list[dict]:
    """InfiniBand/RoCE devices (mlx5_0 ...): their ports' state and rate, and net devices."""
    out = []
    for dev in sorted(glob.glob("/sys/class/infiniband/*")):
        ports = []
        for port in sorted(glob.glob(os.path.join(dev, "ports", "*"))):
            ports.append({"port": os.path.basename(port), "state": _read(port, "state"),
                          "rate": _read(port, "rate"), "link_layer": _read(port, "link_layer")})
        nets = sorted(os.path.basename(p) for p in glob.glob(os.path.join(dev, "device", "net", "*")))
        out.append({"name": os.path.basename(dev), "ports": ports, "netdevs": nets})
    return out


def _read(directory: str, name: str) -> str | None:
    try:
        with open(os.path.join(directory, name)) as f:
            return f.read().strip()
    except OSError:
        return None


def resolve(name: str) -> dict:
    """What a name resolves to here: its first IPv4 address (as c10d and gloo take it)."""
    try:
        infos = socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)
    except OSError as exc:
        return {"name": name, "address": None, "error": str(exc)}
    addresses = list(dict.fromkeys(i[4][0] for i in infos))
    return {"name": name, "address": addresses[0], "all": addresses,
            "loopback": addresses[0].startswith("127.")}


MAX_SMI = 1 << 20  # bytes of nvidia-smi output read
MAX_GPUS = 1024  # GPUs of one node reported


def gpus() -> dict:
    """nvidia-smi's view, when it is there."""
    smi = shutil.which("nvidia-smi")
    devices = sorted(glob.glob("/dev/nvidia[0-9]*"))
    if not smi:
        return {"nvidia_smi": None, "devices": len(devices), "gpus": []}
    try:  # bounded (rank/tools.py): an nvidia-smi printing without end is stopped at the cap
        proc = tools.run([smi, "--query-gpu=index,name,memory.total,pci.bus_id",
                          "--format=csv,noheader"], timeout=30, limit=MAX_SMI)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"nvidia_smi": smi, "devices": len(devices), "gpus": [], "error": str(exc)}
    stdout = proc.stdout.decode("utf-8", "replace")
    rows = [[c.strip() for c in line.split(",")] for line in stdout.splitlines() if line.strip()]
    found = [{"index": r[0], "name": r[1], "memory": r[2], "bus": r[3]}
             for r in rows if len(r) >= 4][:MAX_GPUS]
    topo = ""
    if len(found) > 1:
        try:
            topo = tools.run([smi, "topo", "-m"], timeout=30, limit=MAX_SMI).stdout.decode(
                "utf-8", "replace")
        except (OSError, subprocess.TimeoutExpired):
            pass
    return {"nvidia_smi": smi, "devices": len(devices), "gpus": found,
            "error": proc.stderr.decode("utf-8", "replace").strip()[:2000] if proc.returncode else None,
            "nvlink": "NV" in topo}


# Where module systems keep the file that defines `module` for bash.
MODULE_INITS = ("/usr/share/lmod/lmod/init/bash", "/opt/lmod/lmod/init/bash",
                "/usr/share/Modules/init/bash", "/usr/share/modules/init/bash",
                "/etc/profile.d/lmod.sh", "/etc/profile.d/modules.sh", "/etc/profile.d/z00_lmod.sh")


def modules() -> dict:
    """Whether the job's shell has `module` (the batch shell passes `type -t module`), and which
    module system's init files this node has."""
    return {"in_shell": os.environ.get("HPCTRAIN_PROBE_MODULE") or None,
            "lmod_version": os.environ.get("LMOD_VERSION"),
            "modulepath": os.environ.get("MODULEPATH"),
            "inits": [p for p in MODULE_INITS if os.path.isfile(p)]}


def port_range() -> list[int] | None:
    text = _read("/proc/sys/net/ipv4", "ip_local_port_range")
    return [int(x) for x in text.split()] if text else None


def writable(directory: str) -> dict:
    """Whether this node can create, write, flush and read back a file in `directory`, and
    remove it again: what a checkpoint needs."""
    path = os.path.join(directory, f".hpctrain-probe-{node_name()}-{os.getpid()}")
    try:
        os.makedirs(directory, exist_ok=True)
        # A new file (O_EXCL), never through a link planted at its name.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(node_name())
            f.flush()
            os.fsync(f.fileno())
        with open(path) as f:
            ok = f.read() == node_name()
        os.remove(path)
        return {"dir": directory, "ok": ok, "error": None if ok else "read back something else"}
    except OSError as exc:
        return {"dir": directory, "ok": False,
                "error": f"{exc.strerror or exc} ({errno.errorcode.get(exc.errno, exc.errno)})"}


# What Isaac Lab reads under its asset root (ISAACSIM_ASSET_ROOT): isaaclab.utils.assets.
ISAAC_ASSET_DIR = os.path.join("Isaac", "IsaacLab")


def readable(root: str) -> dict:
    """Whether this node can list the Isaac asset root `root` and its Isaac/IsaacLab folder, and
    how many entries that folder has (an empty mirror is no mirror)."""
    sub = os.path.join(root, ISAAC_ASSET_DIR)
    try:
        with os.scandir(root):
            pass
        with os.scandir(sub) as it:
            entries = sum(1 for _ in zip(range(10000), it))
        ok = entries > 0
        return {"dir": root, "ok": ok, "entries": entries,
                "error": None if ok else f"{sub} is empty"}
    except OSError as exc:
        return {"dir": root, "ok": False,
                "error": f"{exc.filename}: {exc.strerror or exc} "
                         f"({errno.errorcode.get(exc.errno, exc.errno)})"}


def torch_facts() -> dict:
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 (any import failure is the answer)
        return {"version": None, "error": f"{type(exc).__name__}: {exc}"}
    out = {"version": torch.__version__, "cuda": torch.version.cuda,
           "cuda_available": bool(torch.cuda.is_available())}
    try:
        out["nccl"] = ".".join(map(str, torch.cuda.nccl.version())) if out["cuda_available"] else None
    except Exception:  # noqa: BLE001
        out["nccl"] = None
    return out


def facts(resolve_names: list[str], check_dir: str | None, with_torch: bool,
          assets: str | None = None) -> dict:
    try:
        cpus = len(os.sched_getaffinity(0))
    except OSError:
        cpus = os.cpu_count()
    out = {
        "node": node_name(), "hostname": socket.gethostname(),
        "python": {"executable": sys.executable, "version": sys.version.split()[0]},
        "interfaces": interfaces(), "infiniband": infiniband(),
        "resolve": [resolve(n) for n in dict.fromkeys(resolve_names + [node_name()])],
        "gpus": gpus(), "modules": modules(), "port_range": port_range(),
        "cpus": cpus, "slurm_cpus_on_node": os.environ.get("SLURM_CPUS_ON_NODE"),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }
    if check_dir:
        out["writable"] = writable(check_dir)
    if with_torch:
        out["torch"] = torch_facts()
    if assets:
        out["assets"] = readable(assets)
    return out


# ----------------------------------------------------------------------------- reachability

def candidates(head_facts: dict) -> list[str]:
    """How another node might address the head: its name, name+suffix, each of its IPv4s."""
    name = head_facts["node"]
    out = [name] + [name + s for s in SUFFIXES]
    out += [i["ipv4"] for i in head_facts.get("interfaces", [])
            if i.get("ipv4") and not i.get("loopback")]
    return list(dict.fromkeys(out))


def serve(port: int, peers: int, window: float) -> dict:
    """The head: listen on PORT (all addresses), answer each connection with this node's name,
    until every peer said it is done or the window closed."""
    me = node_name()
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        srv.bind(("", port))
    except OSError as exc:
        return {"node": me, "role": "head", "port": port, "listen_error": str(exc)}
    srv.listen(64)
    done: set[str] = set()
    seen = 0
    deadline = time.monotonic() + window
    while len(done) < peers and time.monotonic() < deadline:
        srv.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            conn, _ = srv.accept()
        except socket.timeout:
            break
        with conn:
            conn.settimeout(5)
            try:
                line = conn.makefile("r").readline().split()
                if line[:1] == ["done"] and len(line) > 1:
                    done.add(line[1])
                else:
                    seen += 1
                conn.sendall(f"ok {me}\n".encode())
            except (OSError, IndexError):
                continue
    srv.close()
    return {"node": me, "role": "head", "port": port, "connections": seen,
            "peers_done": sorted(done)}


def reach(head_facts: dict, port: int, window: float) -> dict:
    """A peer: try every candidate address of the head on PORT; then tell the head it is done
    through one that worked."""
    me = node_name()
    deadline = time.monotonic() + window
    results = []
    for target in candidates(head_facts):
        where = resolve(target)
        entry = {"target": target, "address": where.get("address"),
                 "loopback": where.get("loopback", False), "ok": False}
        if where.get("address") is None:
            entry["error"] = f"does not resolve here: {where.get('error')}"
            results.append(entry)
            continue
        last = ""
        while time.monotonic() < deadline:
            try:
                with socket.create_connection((where["address"], port), timeout=3) as conn:
                    conn.sendall(f"probe {me}\n".encode())
                    answer = conn.makefile("r").readline().split()
                entry["ok"] = answer[:1] == ["ok"]
                entry["answered_by"] = answer[1] if len(answer) > 1 else None
                break
            except OSError as exc:
                last = f"{exc.strerror or exc}"
                # Refused: the head's listener may not be up yet; anything else is the answer.
                if not isinstance(exc, ConnectionRefusedError):
                    break
                time.sleep(0.3)
        if not entry["ok"]:
            entry["error"] = last or "no answer"
        results.append(entry)
    for entry in results:
        if entry["ok"]:
            try:
                with socket.create_connection((entry["address"], port), timeout=3) as conn:
                    conn.sendall(f"done {me}\n".encode())
                    conn.makefile("r").readline()
            except OSError:
                pass
            break
    return {"node": me, "role": "peer", "head": head_facts["node"], "port": port,
            "results": results}


def problems(head: str, every: list[dict], nodes: int) -> list[str]:
    """What in the nodes' facts would make a multi-node launch fail, one sentence each: a node
    that did not report, a head name that does not resolve or resolves to loopback, a directory
    a node cannot write."""
    out = []
    if len(every) < nodes:
        seen = ", ".join(sorted(f.get("node", "?") for f in every)) or "none"
        out.append(f"only {len(every)} of {nodes} nodes reported their facts ({seen})")
    for f in every:
        for r in f.get("resolve", []):
            if r.get("name") != head:
                continue
            if r.get("address") is None:
                out.append(f"the head name '{head}' does not resolve on {f['node']}: {r.get('error')}")
            elif r.get("loopback"):
                out.append(f"the head name '{head}' resolves to loopback {r['address']} on "
                           f"{f['node']}: other nodes cannot reach what it advertises")
        w = f.get("writable")
        if w and not w.get("ok"):
            out.append(f"{w['dir']} is not writable from {f['node']}: {w.get('error')}")
    return out


# srun forwards a task's output in pieces and may interleave two tasks' long lines: a record
# longer than this goes out as numbered short lines that read_records() puts together again.
CHUNK = 512


def emit(record: dict) -> None:
    text = json.dumps(record, sort_keys=True)
    if len(text) <= CHUNK:
        print(text, flush=True)
        return
    key = f"{node_name()}.{os.getpid()}"
    parts = [text[i:i + CHUNK] for i in range(0, len(text), CHUNK)]
    for i, part in enumerate(parts):
        print(f"@{key} {i} {len(parts)} {part}", flush=True)


def read_records(text: str) -> list[dict]:
    """The records emit() printed, from the output of several tasks together; a damaged or
    incomplete one is left out (its node then counts as not having reported)."""
    out, pieces = [], {}
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
        elif line.startswith("@"):
            head = line.split(" ", 3)
            if len(head) == 4 and head[1].isdigit() and head[2].isdigit():
                pieces.setdefault(head[0], {})[int(head[1])] = (int(head[2]), head[3])
    for parts in pieces.values():
        total = next(iter(parts.values()))[0]
        if sorted(parts) == list(range(total)):
            try:
                out.append(json.loads("".join(parts[i][1] for i in range(total))))
            except ValueError:
                pass
    return out


def main(args: list[str]) -> int:
    if args[:1] == ["facts"]:
        names, check_dir, with_torch, assets, rest = [], None, False, None, args[1:]
        while rest:
            opt = rest.pop(0)
            if opt == "--resolve" and rest:
                names.append(rest.pop(0))
            elif opt == "--writable" and rest:
                check_dir = rest.pop(0)
            elif opt == "--torch":
                with_torch = True
            elif opt == "--assets" and rest:
                assets = rest.pop(0)
        emit(facts(names, check_dir, with_torch, assets))
        return 0
    if args[:1] == ["reach"] and len(args) == 5:
        head, facts_file, port, window = args[1], args[2], int(args[3]), float(args[4])
        with open(facts_file) as f:
            every = read_records(f.read())
        head_facts = next((f for f in every if f.get("node") == head), {"node": head})
        if node_name() == head:
            out = serve(port, max(0, len(every) - 1), window)
        else:
            out = reach(head_facts, port, window)
        emit(out)
        return 0
    if args[:1] == ["gate"] and len(args) == 4:
        with open(args[2]) as f:
            every = read_records(f.read())
        found = problems(args[1], every, int(args[3]))
        for text in found:
            print(f"hpctrain doctor: {text}", file=sys.stderr, flush=True)
        return 1 if found else 0
    print("usage: rank probe facts [--resolve NAME]... [--writable DIR] [--torch] [--assets ROOT] | "
          "rank probe reach HEAD FACTS.jsonl PORT WINDOW | rank probe gate HEAD FACTS.jsonl NODES",
          file=sys.stderr)
    return 2
