"""What the node samplers' lines say, for `hpctrain report`: each attempt's window and GPUs,
each GPU's and each rank's samples, the samplers' own cost and errors.

The lines are those of usage/NODE.jsonl (rank/during/sampler.py lists every kind), already read
and bounded by follow/report.read_usage: this module reads no file. A node's lines belong to the
attempt its latest "start" line opened; lines before the first start, or after a damaged one,
belong to none and are left out.

A run directory is shared, so every value is untrusted: a number outside what a sampler can
write is forged or damaged, and is left out like a line that is not JSON.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..rank.during.sampler import MAX_GPU_ROWS

MAX_ATTEMPTS = 1000
MAX_ERRORS = 20  # the samplers' error lines kept per directory
MAX_RANK_ROWS = 4096  # rows of one CPU node's sample

# What a sampler can write, with room to spare.
TIME = (0.0, 1e11)  # epoch seconds (the year 5138)
PERCENT = (0.0, 100.0)  # a GPU's utilization
CPU_PCT = (0.0, 1e7)  # a rank's CPU, in % of one core
MIB = (0.0, 1e9)  # a GPU's memory: far above any GPU's
WATTS = (0.0, 1e6)
KIB = (0.0, 1e15)  # a rank's RSS
SECONDS = (0.0, 1e11)  # CPU and wall times
MAX_INDEX = 4096  # GPUs of one node
MAX_RANK = (1 << 31) - 1
MAX_GPUS = 1 << 20  # GPUs of one allocation


def number(v, bounds: tuple[float, float] = TIME) -> float | None:
    """A number within bounds, or None (NaN, ±Infinity, text, true/false and huge values too)."""
    if isinstance(v, (int, float)) and not isinstance(v, bool) and bounds[0] <= v <= bounds[1]:
        return float(v)
    return None


def integer(v, hi: int, lo: int = 0) -> int | None:
    """A whole number from lo to hi, or None (true/false and 1.0 too)."""
    return v if type(v) is int and lo <= v <= hi else None


@dataclass
class SampledAttempt:
    """One attempt as the samplers saw it, all nodes together."""
    start: float | None  # the earliest "start" line
    end: float | None  # the latest line with a time
    first: float | None = None  # the first training step ("first_step")
    gpus: set[tuple[str, int]] = field(default_factory=set)  # (node, index): each GPU sampled in it
    util: dict[tuple[str, int], list[float]] = field(default_factory=dict)  # each GPU's % in it


@dataclass
class GpuSamples:
    """One GPU over the whole directory: its "gpu" line and its samples."""
    uuid: str | None = None
    mem_total: float | None = None  # MiB
    util: list[float] = field(default_factory=list)  # %
    peak: float | None = None  # memory used, MiB
    power: list[float] = field(default_factory=list)  # W


@dataclass
class Samples:
    """Every node's lines of one run (or sweep task) directory, read."""
    attempts: dict[tuple[str, int], SampledAttempt] = field(default_factory=dict)  # (job id, attempt)
    gpus: dict[tuple[str, int], GpuSamples] = field(default_factory=dict)  # (node, index)
    rank_cpu: dict[int, list[float]] = field(default_factory=dict)  # % of one core
    rank_rss: dict[int, float] = field(default_factory=dict)  # the peak, MiB
    node_cpus: dict[str, int] = field(default_factory=dict)  # the CPUs usable on each node
    sampler_cpu_pct: dict[str, float] = field(default_factory=dict)  # its CPU time / wall time
    errors: list[str] = field(default_factory=list)  # "NODE: what went wrong"

    def read_node(self, node: str, lines: list[dict]) -> None:
        """One node's lines, in order."""
        attempt = None
        for rec in lines:
            if rec.get("kind") == "start":
                attempt = self.start(node, rec)
                if attempt is not None and len(self.attempts) > MAX_ATTEMPTS:
                    return
            elif attempt is not None:
                self.line(node, attempt, rec)

    def start(self, node: str, rec: dict) -> SampledAttempt | None:
        """The attempt a "start" line opens (another node's start of it only moves its start
        earlier); None when the line is damaged."""
        start = number(rec.get("time"))
        n = integer(rec.get("attempt"), MAX_RANK)
        if start is None or n is None:
            return None
        cpus = integer(rec.get("cpus"), (1 << 20) - 1, 1)
        if cpus is not None:
            self.node_cpus[node] = cpus
        attempt = self.attempts.setdefault((str(rec.get("job_id", ""))[:128], n),
                                           SampledAttempt(start=start, end=start))
        attempt.start = min(attempt.start, start)
        return attempt

    def line(self, node: str, attempt: SampledAttempt, rec: dict) -> None:
        """Any other line. A kind is taken only with what it must carry; a line that lacks it
        (a "gpu" line without a valid index, a 21st error) is tried as a sample next, the order
        the report has always read them in."""
        kind = rec.get("kind")
        t = number(rec.get("t"))
        if kind == "gpu" and integer(rec.get("index"), MAX_INDEX) is not None:
            self.gpu(node, rec)
        elif kind == "first_step" and (when := number(rec.get("time"))) is not None:
            attempt.first = min(attempt.first, when) if attempt.first else when
        elif kind in ("cost", "end"):
            self.cost(node, attempt, rec)
        elif kind == "error" and isinstance(rec.get("error"), str) and len(self.errors) < MAX_ERRORS:
            self.errors.append(f"{node}: {rec['error'][:300]}")
        elif t is not None and isinstance(rec.get("g"), list):
            self.gpu_sample(node, attempt, t, rec["g"])
        elif t is not None and isinstance(rec.get("r"), list):
            self.rank_sample(attempt, t, rec["r"])

    def gpu(self, node: str, rec: dict) -> None:
        """A "gpu" line: what the GPU is. Its peak and power come from the samples."""
        uuid = rec.get("uuid")
        gpu = self.gpus.setdefault((node, rec["index"]), GpuSamples())
        gpu.uuid = uuid[:200] if isinstance(uuid, str) else None
        gpu.mem_total = number(rec.get("mem_total"), MIB)

    def cost(self, node: str, attempt: SampledAttempt, rec: dict) -> None:
        """A "cost" or "end" line: the sampler's own CPU time, and a time the attempt reached."""
        cpu, child, wall = (number(rec.get(k), SECONDS) for k in ("cpu_s", "child_cpu_s", "wall_s"))
        if cpu is not None and wall and wall >= 1e-3:
            self.sampler_cpu_pct[node] = round(100.0 * (cpu + (child or 0)) / wall, 3)
        if (when := number(rec.get("time"))) is not None:
            attempt.end = max(attempt.end, when)

    def gpu_sample(self, node: str, attempt: SampledAttempt, t: float, rows: list) -> None:
        """[[index, util %, memory used MiB, power W], ...] at time t."""
        attempt.end = max(attempt.end, t)
        for row in rows[:MAX_GPU_ROWS]:
            if not (isinstance(row, list) and len(row) == 4 and integer(row[0], MAX_INDEX) is not None):
                continue
            util, mem, power = (number(v, b) for v, b in zip(row[1:], (PERCENT, MIB, WATTS)))
            key = (node, row[0])
            attempt.gpus.add(key)
            gpu = self.gpus.setdefault(key, GpuSamples())
            if util is not None:
                gpu.util.append(util)
                attempt.util.setdefault(key, []).append(util)
            if mem is not None:
                gpu.peak = max(gpu.peak or 0.0, mem)
            if power is not None:
                gpu.power.append(power)

    def rank_sample(self, attempt: SampledAttempt, t: float, rows: list) -> None:
        """A CPU node's [[rank, CPU % of one core, RSS KiB], ...] at time t."""
        attempt.end = max(attempt.end, t)
        for row in rows[:MAX_RANK_ROWS]:
            if not (isinstance(row, list) and len(row) == 3 and integer(row[0], MAX_RANK) is not None):
                continue
            cpu, rss = number(row[1], CPU_PCT), number(row[2], KIB)
            if cpu is not None:
                self.rank_cpu.setdefault(row[0], []).append(cpu)
            if rss is not None:
                self.rank_rss[row[0]] = max(self.rank_rss.get(row[0], 0.0), rss / 1024)


def read_samples(usage: dict[str, list[dict]]) -> Samples:
    """node -> its sampler's lines (follow/report.read_usage) -> what they say, all nodes."""
    samples = Samples()
    for node, lines in usage.items():
        samples.read_node(node, lines)
    return samples
