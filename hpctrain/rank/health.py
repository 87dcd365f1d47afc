"""The health gate: is this node's GPU set fit to train on, read from `nvidia-smi` before the
ranks start (issue 29). It runs inside the node check (rank/preflight.nodes), once per node.

Checks (bootstrap.json's "health", from the job's and site's `health:` sections; each can be
switched off there):

- gpus: the GPUs the plan expects (resources.gpus_per_node) are visible; nvidia-smi answers
  at all (a driver that does not, or a query that hangs past `timeout`, fails the node). A job
  that asks for GPUs fails closed: a node without nvidia-smi, or whose nvidia-smi answers
  without a field the gate reads, fails, unless the site allows it (require_nvidia_smi: false);
- ecc: no uncorrected volatile ECC error on any of them;
- retired_pages: no page retirement pending (GPUs before Ampere);
- row_remap: no row remap pending and none failed (Ampere and later);
- foreign_memory_mib: no GPU holds more memory than this before the job's ranks exist (another
  process, a leftover of an earlier job);
- same_driver: compared across nodes by the node barrier (preflight.py), not here;
- cuda: each of the job's GPUs takes a tiny CUDA allocation, through torch in the job's own
  interpreter and in a process of its own (cuda_probe); where torch is not importable there,
  the probe is skipped with a note. Off where the ranks run on CPU (cpu_mode: on);
- dcgm_diag: `dcgmi diag -r 1 -j` (DCGM's quick diagnostic) where dcgmi is installed: a test it
  fails fails the node, named with the GPU and DCGM's own words (off by default: a site that
  runs DCGM turns it on).

Only the job's GPUs are judged (ours): those CUDA_VISIBLE_DEVICES names, and of them the first
resources.gpus_per_node (the ranks pin cuda:LOCAL_RANK): a display server's memory on another GPU
of a workstation does not refuse a 1-GPU job.

The verdict is written to status/health/NODE.json (what recovery.py blames a failure on, and
what `status` shows), and returned. stdlib only: nvidia-smi's CSV output is parsed here.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time

from . import tools

# Only what the gate checks (each field's real H100 value is in
# tests/fixtures/nvidia-smi/nvidia-smi-h100.txt): a field a driver renames must not fail a node.
GPU_FIELDS = ("index,uuid,name,pci.bus_id,driver_version,memory.total,memory.used,"
              "ecc.errors.uncorrected.volatile.total,retired_pages.pending")
REMAP_FIELDS = ("gpu_bus_id,remapped_rows.correctable,remapped_rows.uncorrectable,"
                "remapped_rows.pending,remapped_rows.failure")
MAX_OUTPUT = 1 << 20  # bytes of nvidia-smi output read
_NODE_SAFE = re.compile(r"[^A-Za-z0-9._-]")
_NA = ("[N/A]", "N/A", "[Not Supported]", "Not Supported", "")

# (a bootstrap.json without "cuda", of an earlier version, probes nothing)
DEFAULTS = {"gpus": True, "ecc": True, "retired_pages": True, "row_remap": True,
            "foreign_memory_mib": 1024, "same_driver": True, "timeout": 30, "dcgm_diag": False,
            "require_nvidia_smi": True, "cuda": False}
DCGM_TIMEOUT = 300  # seconds: a level-1 diagnostic takes tens of them; a hung DCGM no more
PROBE_TIMEOUT = 180  # seconds for the CUDA probe: torch's import and CUDA's start; a hung driver no more
MAX_DCGM_PROBLEMS = 64


def settings(run_dir: str) -> dict | None:
    """bootstrap.json's "health" ({expected_gpus, checks...}), or None: no gate."""
    from .records import bootstrap_section
    health = bootstrap_section(run_dir, "health")
    if health is None or not isinstance(health.get("expected_gpus"), int):
        return None
    return {**DEFAULTS, **health}


def _query_tool(args: list[str], timeout: float, tool: str = "nvidia-smi",
                env: dict | None = None) -> tuple[int, str]:
    """(exit status, output) of TOOL ARGS, the GPU tools the gate reads (nvidia-smi, dcgmi, the
    CUDA probe), bounded; 124 when it did not answer in time."""
    try:  # read as it comes and capped (rank/tools.py): a tool printing without end is stopped
        proc = tools.run([tool, *args], timeout=timeout, limit=MAX_OUTPUT, env=env)
    except subprocess.TimeoutExpired:
        return 124, f"{tool} did not answer within {timeout:g} s"
    except tools.ToolOutputTooLarge as exc:
        return 125, str(exc)
    except OSError as exc:
        return 127, f"{tool} could not run: {exc}"
    out = (proc.stdout[:MAX_OUTPUT] + proc.stderr[:4096]).decode("utf-8", "replace")
    return proc.returncode, out


def parse_gpus(text: str) -> list[dict]:
    """The rows of the GPU query (csv, noheader, nounits) as dicts of GPU_FIELDS."""
    return _parse(text)[0]


def _parse(text: str) -> tuple[list[dict], list[str]]:
    """(the rows of the GPU query, the non-empty lines that are not rows: an answer without
    a field the gate reads)."""
    names = GPU_FIELDS.split(",")
    rows, odd = [], []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == len(names) and parts[0].isdigit():
            rows.append(dict(zip(names, parts)))
        elif line.strip():
            odd.append(line.strip())
    return rows, odd


def parse_remaps(text: str) -> dict[str, dict]:
    """The remapped-rows query (csv with its header) by bus id."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return {}
    header = [h.strip() for h in lines[0].split(",")]
    out = {}
    for line in lines[1:]:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == len(header):
            row = dict(zip(header, parts))
            if row.get("gpu_bus_id"):
                out[row["gpu_bus_id"].lower()] = row
    return out


def ours(rows: list[dict], visible: str | None, planned: int = 0) -> list[dict]:
    """The job's GPUs among those nvidia-smi lists: CUDA_VISIBLE_DEVICES's, where it names
    UUIDs, or indices of a node whose GPUs are not all the job's (no device cgroup); of those,
    the first `planned` (the ranks pin cuda:0..planned-1; 0: all of them). Fewer than planned
    are all kept: the gpus check names the shortfall."""
    mine = rows
    items = [v.strip() for v in (visible or "").split(",") if v.strip()]
    if items and all(v.startswith(("GPU-", "MIG-")) for v in items):
        mine = [r for r in rows if any(r["uuid"].startswith(v) for v in items)]
    elif items and all(v.isdigit() for v in items) and len(rows) > len(items):
        # in CUDA_VISIBLE_DEVICES's order: the ranks' cuda:0, cuda:1, ...
        by_index = {r["index"]: r for r in rows}
        mine = [by_index[v] for v in dict.fromkeys(items) if v in by_index]
    return mine[:planned] if 0 < planned < len(mine) else mine


def _gpu(row: dict) -> str:
    return f"GPU {row['index']} ({row['pci.bus_id']}, {row['uuid']})"


def check_rows(rows: list[dict], remaps: dict[str, dict] | None, cfg: dict) -> list[dict]:
    """The problems of these GPUs, each {gpu, uuid, check, message}."""
    problems: list[dict] = []

    def bad(row: dict | None, check: str, message: str) -> None:
        problems.append({"gpu": int(row["index"]) if row else None,
                         "uuid": row["uuid"] if row else None, "check": check,
                         "message": f"{_gpu(row)}: {message}" if row else message})
    expected = cfg["expected_gpus"]
    if cfg.get("gpus") and len(rows) < expected:
        # nvidia-smi numbers the GPUs it sees from 0: the bus ids tell which one is gone.
        bad(None, "gpus", f"{len(rows)} of the {expected} GPUs the job expects are visible"
            + (f" (bus ids {', '.join(r['pci.bus_id'] for r in rows)})" if rows else ""))
    for row in rows:
        ecc = row["ecc.errors.uncorrected.volatile.total"]
        if cfg.get("ecc") and ecc not in _NA and ecc.isdigit() and int(ecc) > 0:
            bad(row, "ecc", f"{ecc} uncorrected volatile ECC error(s)")
        if cfg.get("retired_pages") and row["retired_pages.pending"].lower() == "yes":
            bad(row, "retired_pages", "a page retirement is pending (reset the GPU)")
        remap = (remaps or {}).get(row["pci.bus_id"].lower())
        if cfg.get("row_remap") and remap:
            if remap.get("remapped_rows.failure", "").lower() == "yes":
                bad(row, "row_remap", "a row remap failed")
            elif remap.get("remapped_rows.pending", "").lower() == "yes":
                bad(row, "row_remap", "a row remap is pending (reset the GPU)")
        limit = cfg.get("foreign_memory_mib")
        used = row["memory.used"]
        if limit is not None and used.isdigit() and int(used) > limit:
            bad(row, "foreign_memory", f"{used} MiB in use before the job's ranks started "
                f"(another process holds it; health.foreign_memory_mib: {limit})")
    return problems


def gate(cfg: dict, node: str) -> dict:
    """This node's verdict: {node, ok, driver, gpus, problems, notes, seconds}."""
    start = time.monotonic()
    verdict: dict = {"node": node, "ok": True, "driver": None, "gpus": [], "problems": [],
                     "notes": [], "time": time.time()}
    if shutil.which("nvidia-smi") is None:
        if cfg["expected_gpus"] > 0 and cfg.get("gpus"):
            _unchecked(verdict, cfg, "nvidia-smi is not on PATH")
        verdict["ok"] = not verdict["problems"]
        verdict["seconds"] = round(time.monotonic() - start, 3)
        return verdict
    status, out = _query_tool([f"--query-gpu={GPU_FIELDS}", "--format=csv,noheader,nounits"],
                       cfg["timeout"])
    rows, odd = _parse(out) if status == 0 else ([], [])
    if (status != 0 and "is not a valid field" in out) or (odd and not rows):
        # This nvidia-smi does not know a field (a driver that renamed one), or answered without
        # one: the gate cannot judge the GPUs.
        first = next((line.strip() for line in out.splitlines() if line.strip()), "")
        _unchecked(verdict, cfg, f"nvidia-smi answered without a field the gate reads ({first[:200]})")
    elif status != 0:
        first = next((line.strip() for line in out.splitlines() if line.strip()), "")
        verdict["problems"].append({"gpu": None, "uuid": None, "check": "gpus", "message":
                                    f"nvidia-smi failed (status {status}): {first[:300]}"})
    else:
        rows = ours(rows, os.environ.get("CUDA_VISIBLE_DEVICES"), cfg["expected_gpus"])
        remaps = None
        if cfg.get("row_remap") and rows:
            code, text = _query_tool([f"--query-remapped-rows={REMAP_FIELDS}", "--format=csv"],
                              cfg["timeout"])
            if code == 0:
                remaps = parse_remaps(text)
            else:
                verdict["notes"].append("no row-remap report (a GPU before Ampere?)")
        verdict["problems"] = check_rows(rows, remaps, cfg)
    drivers = sorted({r["driver_version"] for r in rows})
    verdict["driver"] = drivers[0] if len(drivers) == 1 else (",".join(drivers) or None)
    verdict["gpus"] = [{"index": int(r["index"]), "uuid": r["uuid"], "name": r["name"],
                        "bus": r["pci.bus_id"]} for r in rows]
    if cfg.get("cuda") and rows and not verdict["problems"] and cfg["expected_gpus"] > 0:
        problems, notes = cuda_probe(rows)
        verdict["problems"] += problems
        verdict["notes"] += notes
    if cfg.get("dcgm_diag"):
        if shutil.which("dcgmi") is None:
            verdict["notes"].append("dcgmi is not on PATH: the DCGM diagnostic was not run")
        else:
            verdict["problems"] += dcgm_diag()
    verdict["ok"] = not verdict["problems"]
    verdict["seconds"] = round(time.monotonic() - start, 3)
    return verdict


def _unchecked(verdict: dict, cfg: dict, why: str) -> None:
    """The gate cannot read the GPUs of a job that asks for some: the node fails (fail closed),
    unless the site allows nodes it cannot check (health.require_nvidia_smi: false)."""
    if cfg.get("require_nvidia_smi", True):
        verdict["problems"].append({"gpu": None, "uuid": None, "check": "gpus", "message": (
            f"{why}: the job asks for {cfg['expected_gpus']} GPU(s) a node and the health gate "
            "cannot check them (a site whose nodes have no nvidia-smi sets "
            "health.require_nvidia_smi: false)")})
    else:
        verdict["notes"].append(f"{why}: the GPUs were not checked (health.require_nvidia_smi: false)")


# ----------------------------------------------------------------------------- CUDA probe

def cuda_probe(rows: list[dict]) -> tuple[list[dict], list[str]]:
    """(problems, notes): each GPU of `rows` takes a tiny CUDA allocation. In a process of its
    own (`rank cuda-probe N`), so that the agent, which lives as long as the training, holds no
    CUDA context (memory on every GPU); with this process's interpreter, the job's own (the
    gate runs in the launch step under it), so its torch and CUDA are the training's. Its
    CUDA_VISIBLE_DEVICES lists the GPUs by UUID, in the job's order: cuda:I is rows[I]."""
    env = dict(os.environ)
    visible = env.get("CUDA_VISIBLE_DEVICES", "")
    if "MIG-" not in visible:  # a MIG slice is named by its own UUID: keep the job's list
        env["CUDA_VISIBLE_DEVICES"] = ",".join(r["uuid"] for r in rows)
    here = os.path.dirname(os.path.abspath(__file__))
    status, out = _query_tool([here, "cuda-probe", str(len(rows))], PROBE_TIMEOUT,
                              tool=sys.executable, env=env)
    return probe_verdict(rows, status, out)


def probe_verdict(rows: list[dict], status: int, out: str) -> tuple[list[dict], list[str]]:
    """The gate's problems and notes from the probe's exit status and output (its last line is
    probe()'s JSON)."""
    lines = [line for line in out.splitlines() if line.strip()]
    try:
        said = json.loads(lines[-1]) if lines else None
    except ValueError:
        said = None
    if status != 0 or not isinstance(said, dict):
        last = (lines[-1] if lines else "no output").strip()
        return [{"gpu": None, "uuid": None, "check": "cuda", "message":
                 f"the CUDA probe failed (status {status}): {last[:300]}"}], []
    if isinstance(said.get("skip"), str):
        return [], [f"CUDA not probed: {said['skip'][:300]}"]
    if isinstance(said.get("error"), str):
        return [{"gpu": None, "uuid": None, "check": "cuda", "message":
                 f"CUDA cannot use the GPUs nvidia-smi lists: {said['error'][:300]}"}], []
    problems = []
    for item in said.get("failed") or []:
        if isinstance(item, list) and len(item) == 2 and isinstance(item[0], int) \
                and 0 <= item[0] < len(rows):
            row = rows[item[0]]
            problems.append({"gpu": int(row["index"]), "uuid": row["uuid"], "check": "cuda",
                             "message": f"{_gpu(row)}: a tiny CUDA allocation failed: "
                                        f"{str(item[1])[:300]}"})
    return problems, []


def probe(count: int) -> dict:
    """`rank cuda-probe N`, in its own process: a tiny allocation and a sum on cuda:0..N-1, each
    synchronized. {"skip": why} without torch, {"error": why} when CUDA sees fewer devices,
    else {"failed": [[ordinal, error], ...]} (empty: every GPU works)."""
    try:
        import torch
    except ImportError as exc:
        return {"skip": f"torch is not importable by {sys.executable} ({exc})"}
    try:
        available = torch.cuda.is_available()
        found = torch.cuda.device_count() if available else 0
    except Exception as exc:  # noqa: BLE001 (the driver's errors come in many kinds)
        return {"error": f"{type(exc).__name__}: {exc}"}
    if found < count:
        return {"error": f"torch sees {found} CUDA device(s) of the {count} the job uses"
                         + ("" if available else " (torch.cuda.is_available() is False)")}
    failed = []
    for i in range(count):
        try:
            x = torch.ones(16, device=f"cuda:{i}")
            if float((x + x).sum().item()) != 32.0:
                raise RuntimeError("1 + 1 is not 2 on this GPU")
            torch.cuda.synchronize(i)
        except Exception as exc:  # noqa: BLE001
            failed.append([i, f"{type(exc).__name__}: {exc}"])
    return {"failed": failed}


def dcgm_diag() -> list[dict]:
    """`dcgmi diag -r 1 -j`: each result it failed, as the gate's problems; its exit status
    alone (non-zero: DCGM found an error) when its output names none."""
    status, out = _query_tool(["diag", "-r", "1", "-j"], DCGM_TIMEOUT, tool="dcgmi")
    problems = dcgm_failures(out)
    if status != 0 and not problems:
        first = next((line.strip() for line in out.splitlines() if line.strip()), "")
        problems = [{"gpu": None, "uuid": None, "check": "dcgm_diag",
                     "message": f"dcgmi diag -r 1 failed (status {status}): {first[:300]}"}]
    return problems


def dcgm_failures(text: str) -> list[dict]:
    """The failed results in DCGM's JSON report (its "test_categories": each category's tests,
    each test's results per entity, with a status and warnings)."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return []
    report = data.get("DCGM Diagnostic") if isinstance(data, dict) else None
    problems: list[dict] = []
    if isinstance(report, dict):
        for category in _dicts(report.get("test_categories")):
            for test in _dicts(category.get("tests")):
                name = str(test.get("name", "?"))[:100]
                for result in _dicts(test.get("results")):
                    if result.get("status") != "Fail" or len(problems) >= MAX_DCGM_PROBLEMS:
                        continue
                    gpu = result.get("entity_id") if result.get("entity_group") == "GPU" else None
                    gpu = gpu if isinstance(gpu, int) and not isinstance(gpu, bool) else None
                    words = "; ".join(str(w.get("warning", ""))[:300]
                                      for w in _dicts(result.get("warnings"))[:4]) or "failed"
                    where = f" on GPU {gpu}" if gpu is not None else ""
                    problems.append({"gpu": gpu, "uuid": None, "check": "dcgm_diag",
                                     "message": f"dcgmi diag -r 1: {name}{where}: {words}"})
    return problems


def _dicts(value) -> list[dict]:
    return [v for v in value[:1000] if isinstance(v, dict)] if isinstance(value, list) else []


def summary(verdict: dict) -> str:
    """One line: the node and each problem."""
    return (f"{verdict['node']} failed the health gate: "
            + "; ".join(p["message"] for p in verdict["problems"]))


def record_path(run_dir: str, node: str) -> str:
    return os.path.join(run_dir, "status", "health", f"{_NODE_SAFE.sub('_', node)[:200]}.json")


def record(run_dir: str, verdict: dict) -> None:
    from .records import write_json
    path = record_path(run_dir, verdict["node"])
    try:
        write_json(path, verdict, root=run_dir)
    except OSError:
        pass


MAX_NODES = 4096  # node records read back


def failed_nodes(run_dir: str) -> list[dict]:
    """The verdicts of this attempt's nodes that failed (status/health/*.json), by node."""
    from .records import read_json
    directory = os.path.join(run_dir, "status", "health")
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(".json"))[:MAX_NODES]
    except OSError:
        return []
    out = []
    for name in names:
        try:
            data = read_json(os.path.join(directory, name))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("ok") is False and isinstance(
                data.get("node"), str) and isinstance(data.get("problems"), list):
            out.append(data)
    return out


def odd_drivers(drivers: dict[str, str]) -> tuple[list[str], str] | None:
    """(the nodes whose driver differs from the others', why) or None when all agree. The most
    common version is the norm; on a tie, the first node's (the head's)."""
    known = {n: d for n, d in drivers.items() if d}
    versions = list(dict.fromkeys(known.values()))
    if len(versions) < 2:
        return None
    norm = max(versions, key=lambda v: (sum(1 for d in known.values() if d == v),
                                        -versions.index(v)))
    odd = [n for n, d in known.items() if d != norm]
    return odd, ("the nodes' NVIDIA drivers differ: " + ", ".join(
        f"{n} {d}" for n, d in known.items() if d != norm) + f" (the others: {norm})")
