"""Shared fixtures: an isolated hpctrain home, the CLI as a real subprocess, the real cluster."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CLUSTER_UP = ROOT / "tests" / "cluster" / "up.sh"


# The tiers: a test's directory under tests/ is its tier, and conftest gives it that marker, so
# `pytest tests/slurm` and `pytest -m slurm` select the same tests (docs/testing.md).
TIERS = {
    "unit": "pip install -e '.[test]' alone; no cluster, no root; starts no job, rank or daemon (< 1 min)",
    "local": "this machine, every extra: job scripts, torchrun, podman, wheels, the watch extra; no cluster",
    "ssh": "the ssh backend against the local cluster's sshds (tests/cluster/up.sh)",
    "slurm": "the local Slurm cluster (tests/cluster/up.sh)",
    "e2e": "real RL trainings with the RL libraries (most on the local Slurm cluster)",
}


def jax_cache_env() -> dict[str, str]:
    """A persistent XLA compilation cache for the suite's JAX ranks (skrl_jax), which all compile
    the same small PPO graphs: cold, the compile is two thirds of such a rank's CPU (15 core-s
    of which 5 remain with the cache). Private to this user; a size limit turns on JAX's file
    lock, as the concurrent sessions of scripts/test-all.sh share it. Set once, at the session's
    start (a test's `home` points XDG_CACHE_HOME at its own directory): jobs get it from the
    environment (local runs, sbatch's --export=ALL); an ssh job needs it in its env:."""
    return {k: v for k, v in os.environ.items() if k.startswith(("JAX_COMPILATION_CACHE_",
                                                                 "JAX_PERSISTENT_CACHE_"))}


def _set_jax_cache() -> None:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    path = base / "hpctrain-tests" / "jax-compile"
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    for key, value in {"JAX_COMPILATION_CACHE_DIR": str(path),
                       "JAX_COMPILATION_CACHE_MAX_SIZE": str(2**30),
                       "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                       "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}.items():
        os.environ.setdefault(key, value)


def pytest_configure(config):
    _set_jax_cache()
    for tier, what in TIERS.items():
        config.addinivalue_line("markers", f"{tier}: {what}")
    config.addinivalue_line("markers", "alone: needs the local cluster to itself (restarts or "
                            "repairs it, or counts slurmctld's requests): scripts/test-all.sh runs "
                            "these before the sessions that share the cluster")


def pytest_collection_modifyitems(config, items):
    """Every test carries the marker of its directory's tier, and no other tier's."""
    tests_dir = ROOT / "tests"
    for item in items:
        try:
            tier = Path(str(item.path)).resolve().relative_to(tests_dir).parts[0]
        except ValueError:
            continue  # not one of the suite's tests (a path given outside tests/)
        if tier not in TIERS:
            raise pytest.UsageError(f"{item.nodeid}: every test lives in a tier's directory "
                                    f"(tests/{{{','.join(TIERS)}}}/)")
        others = {m.name for m in item.iter_markers() if m.name in TIERS} - {tier}
        if others:
            raise pytest.UsageError(f"{item.nodeid}: marked {', '.join(sorted(others))}, but its "
                                    f"directory makes it {tier}: the directory is the tier")
        item.add_marker(tier)


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true",
                     help="rewrite tests/golden/ from the current templates (review the diff)")


@pytest.fixture
def update_golden(request) -> bool:
    return request.config.getoption("--update-golden")


def pytest_terminal_summary(terminalreporter):
    from tests.hostile import COUNTS
    if COUNTS:
        total = sum(COUNTS.values())
        parts = ", ".join(f"{family} {n}" for family, n in sorted(COUNTS.items()))
        terminalreporter.write_line(f"hostile inputs tried: {total} ({parts}); every one refused "
                                    "with exit 2 or handled exactly")
        report = os.environ.get("HPCTRAIN_HOSTILE_REPORT")
        if report:
            Path(report).write_text(json.dumps(dict(COUNTS, total=total), indent=2) + "\n")


def pytest_sessionfinish(session, exitstatus):
    """A skipped test is a failed test: a tool missing in CI (shellcheck, Slurm, the cluster)
    must not pass as green. The run fails with the skips named."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter else []
    if skipped and exitstatus == 0:
        reporter.write_line(f"FAILED: {len(skipped)} test(s) skipped; every test must run:", red=True)
        for report in skipped[:20]:
            reporter.write_line(f"  {report.nodeid}: {report.longrepr[-1] if isinstance(report.longrepr, tuple) else report.longrepr}")
        session.exitstatus = 1


@pytest.fixture(autouse=True)
def _restore_environment():
    """Tests of the bootstrap set rank variables in os.environ; jobs submitted later in the same
    session would inherit them through sbatch's --export=ALL. Every test starts from the same env."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A private index/state/cache and runs directory for one test."""
    h = tmp_path / "home"
    monkeypatch.setenv("HPCTRAIN_HOME", str(h))
    monkeypatch.setenv("HPCTRAIN_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("HPCTRAIN_SITE", raising=False)
    monkeypatch.delenv("HPCTRAIN_SITE_PATH", raising=False)
    return h


# The `hpctrain` the `cli` fixture runs: HPCTRAIN_TEST_CLI names an installed one (test-all.sh:
# the README's install, a built wheel, in a copy of this checkout), so that every command family
# the tiers run goes through what a user installs, and a module or data file left out of the
# wheel fails; else this checkout's, `python -m hpctrain` from the repository root.
INSTALLED_CLI = os.environ.get("HPCTRAIN_TEST_CLI")
HPCTRAIN = [INSTALLED_CLI] if INSTALLED_CLI else [sys.executable, "-m", "hpctrain"]


class Cli:
    """`hpctrain ...` (HPCTRAIN) in a subprocess, from the repository root."""

    def __call__(self, *args, check: bool | None = True, timeout: float = 120, env=None,
                 cwd=ROOT) -> subprocess.CompletedProcess:
        full_env = dict(os.environ, **(env or {}))
        proc = subprocess.run([*HPCTRAIN, *map(str, args)], cwd=cwd,
                              capture_output=True, text=True, timeout=timeout, env=full_env)
        if check and proc.returncode != 0:
            raise AssertionError(f"hpctrain {' '.join(map(str, args))} exited {proc.returncode}\n"
                                 f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
        return proc


@pytest.fixture
def cli(home) -> Cli:
    return Cli()


@pytest.fixture(scope="session")
def cluster(_cluster_lock):
    """The real local Slurm cluster (tests/cluster/up.sh is idempotent: ~0.05 s when up), held
    for this pytest session alone (see _cluster_lock).

    Under scripts/test-all.sh (HPCTRAIN_TEST_CLUSTER_SHARED=1) the script has brought it up and
    several sessions share it: up.sh is not run again, as its repairs (an sshd started again, a
    node's hosts file re-synced) would land in another session's test that stopped or altered
    them on purpose."""
    # Another release's cluster is started on the host, before the session enters its namespace
    # (tests/cluster/release-exec.sh), where up.sh's namespaces and mounts would not outlive it.
    if os.environ.get("HPCTRAIN_TEST_CLUSTER_SHARED") == "1" or SLURM_RELEASE != "22.05":
        proc = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=60)
        if proc.returncode != 0 or "UP" not in proc.stdout:
            pytest.fail(f"the shared local Slurm {SLURM_RELEASE} cluster does not answer (start it "
                        f"with HPCTRAIN_CLUSTER_SLURM={SLURM_RELEASE} tests/cluster/up.sh):\n"
                        f"{proc.stdout}\n{proc.stderr}")
        return "localcluster"
    proc = subprocess.run(["bash", str(CLUSTER_UP)], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        pytest.fail(f"could not start the local Slurm cluster:\n{proc.stdout}\n{proc.stderr}")
    return "localcluster"


def job_states(job_id: str) -> list[dict[str, str]]:
    """scontrol's record of the job: one per array task of an array (a task that started has a
    job id of its own, the last pending ones share the array's)."""
    out = subprocess.run(["scontrol", "-o", "show", "job", str(job_id)], capture_output=True,
                         text=True).stdout
    return [dict(t.split("=", 1) for t in line.split() if "=" in t)
            for line in out.splitlines() if line.strip()]


def job_state(job_id: str) -> dict[str, str]:
    found = job_states(job_id)
    return found[-1] if found else {}


def wait_for_job(job_id: str, timeout: float = 180, states=("COMPLETED", "FAILED", "CANCELLED",
                 "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL")) -> dict[str, str]:
    """Poll scontrol until the job (every task of an array) reaches one of `states`; a task
    that did not complete is the one returned. Fail the test on timeout."""
    deadline = time.monotonic() + timeout
    info: dict[str, str] = {}
    while time.monotonic() < deadline:
        tasks = job_states(job_id)
        info = tasks[-1] if tasks else {}
        if tasks and all(t.get("JobState") in states for t in tasks):
            return next((t for t in tasks if t.get("JobState") != "COMPLETED"), info)
        time.sleep(0.5)
    subprocess.run(["scancel", str(job_id)])
    raise AssertionError(f"job {job_id} did not reach {states} in {timeout}s: {info.get('JobState')}")


def submitted(stdout: str) -> tuple[str, Path]:
    """(job id, run dir) from `hpctrain submit` output."""
    job_id = run_dir = None
    for line in stdout.splitlines():
        if line.startswith("submitted "):
            job_id = line.split(" job ")[1].split()[0]
        if line.startswith("run directory: "):
            run_dir = Path(line.split(": ", 1)[1])
    assert job_id and run_dir, stdout
    return job_id, run_dir


def read_results(run_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((run_dir / "results").glob("rank-*.json"))]


# The Slurm release of the cluster this session tests (tests/cluster/README.md): 22.05, the
# machine's own, or 24.11 (a cluster of its own, with its own lock; run the session through
# tests/cluster/release-exec.sh, whose Slurm commands are that release's).
SLURM_RELEASE = os.environ.get("HPCTRAIN_CLUSTER_SLURM", "22.05")
CLUSTER_LOCK = Path("/run/hpctrain-cluster.lock" if SLURM_RELEASE == "22.05"
                    else f"/run/hpctrain-cluster-{SLURM_RELEASE}.lock")
CLUSTER_LOCK_WAIT_S = 3600


def _lock_held_by_us_or_an_ancestor(path: Path) -> bool:
    """True when an inherited descriptor or an ancestor process already holds the flock on
    `path` (e.g. `flock /run/hpctrain-cluster.lock pytest ...`): waiting would deadlock."""
    import fcntl

    real = os.path.realpath(path)
    for fd_name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd_name}") != real:
                continue
            fcntl.flock(int(fd_name), fcntl.LOCK_EX | fcntl.LOCK_NB)  # same open file: succeeds
            return True
        except OSError:
            continue
    try:
        inode = os.stat(path).st_ino
        locks = Path("/proc/locks").read_text()
    except OSError:
        return False
    holders = {int(f[4]) for f in (line.split() for line in locks.splitlines())
               if len(f) > 5 and f[1] == "FLOCK" and f[5].endswith(f":{inode}")}
    pid = os.getppid()
    while pid > 1:
        if pid in holders:
            return True
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return False


@pytest.fixture(scope="session")
def _cluster_lock(request):
    """One pytest session at a time on the one local cluster: an exclusive flock on
    /run/hpctrain-cluster.lock for the whole session, taken before up.sh runs (up.sh/down.sh
    do not take it; they serialise among themselves on their own lock). Waits up to an hour,
    saying so. Shell users take the same lock: `flock -w 3600 /run/hpctrain-cluster.lock CMD`."""
    import fcntl

    if _lock_held_by_us_or_an_ancestor(CLUSTER_LOCK):
        yield
        return
    fd = os.open(CLUSTER_LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            capman = request.config.pluginmanager.getplugin("capturemanager")
            start = time.monotonic()
            deadline = start + CLUSTER_LOCK_WAIT_S
            next_note = start
            while True:
                if time.monotonic() >= next_note:
                    with capman.global_and_fixture_disabled():
                        sys.stderr.write(
                            f"\nwaiting for {CLUSTER_LOCK}: another session uses the local cluster "
                            f"({time.monotonic() - start:.0f} s so far, at most {CLUSTER_LOCK_WAIT_S} s)\n")
                        sys.stderr.flush()
                    next_note += 60
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        pytest.fail(f"{CLUSTER_LOCK} still held by another session after "
                                    f"{CLUSTER_LOCK_WAIT_S} s")
                    time.sleep(1)
        yield
    finally:
        os.close(fd)  # releases the lock
