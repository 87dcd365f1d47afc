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
