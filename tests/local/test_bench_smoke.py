"""bench/run --quick runs: a couple of repetitions of hpctrain's cheap rows, no peers, no cluster.
The benchmark is not a test: nothing here judges the numbers, only that the table comes out."""
from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT


def test_bench_quick_prints_the_table(tmp_path):
    md = tmp_path / "bench.md"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "run"), "--quick", "--markdown", str(md)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for row in ("render 2 nodes × 4 GPUs", "expand 10,000 hosts, contiguous",
                "expand 10,000 hosts, fragmented", "rank start → user's program"):
        assert row in proc.stdout, proc.stdout
    assert "floor (Jinja2+PyYAML)" in proc.stdout and "python -c pass" in proc.stdout
    text = md.read_text()
    assert text.startswith("| row | contender |") and "machine:" in text


def _bench_module():
    """bench/run as a module (it is a script without .py)."""
    import importlib.machinery
    import importlib.util
    loader = importlib.machinery.SourceFileLoader("bench_run", str(ROOT / "bench" / "run"))
    spec = importlib.util.spec_from_loader("bench_run", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_a_failed_row_is_reported_and_never_loses_the_others(tmp_path):
    """The two ways a full run was lost: the cluster gone under the load rows (sdiag failed),
    and a steady-state row that measured 0 RPCs per 10 s (a ZeroDivisionError in the ratios)."""
    bench = _bench_module()
    table = bench.Table()
    with table.attempt("load", "hpctrain list, 1 unfinished run(s)"):
        subprocess.run(["bash", "-c", "echo 'sdiag: Unable to contact slurm controller' >&2; exit 1"],
                       capture_output=True, text=True, check=True)
    with table.attempt("load", "submit --wait, steady state, per 10 s"):
        table.add("load", "submit --wait, steady state, per 10 s", {"hpctrain": bench.Sample([0.0])},
                  unit="RPC")
    with table.attempt("scale", "local Slurm 2×1"):
        raise SystemExit("hpctrain job 12 ended FAILED before its ranks started")
    bench.check_targets(table)
    text = "\n".join(table.lines(markdown=False))
    md = "\n".join(table.lines(markdown=True))
    assert [f["row"] for f in table.failed] == ["hpctrain list, 1 unfinished run(s)", "local Slurm 2×1"]
    assert "Unable to contact slurm controller" in table.failed[0]["error"]
    for out in (text, md):
        assert "submit --wait, steady state, per 10 s" in out and "0 RPC" in out
        assert "hpctrain list, 1 unfinished run(s)" in out and "ended FAILED before" in out
    assert ("submit --wait: at most 1 query per 10 s", True, "0.00 per 10 s") in table.targets
