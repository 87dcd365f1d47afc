"""The manual's screen of a preempted run (docs/screens/status-preempted.txt) is what `hpctrain
status` prints now for a run preempted, requeued and training again on the real cluster:
scripts/docs-screens.py --check runs it again and compares."""
from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT


def test_preempted_screen_matches_a_real_preemption(cluster, tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "docs-screens.py"), "--check",
                           "--site", cluster, "--workdir", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "screens: up to date" in proc.stdout
