"""Issue 43, item 4, over ssh: a site's hosts after the job's are its spares. A 2-host job with
one spare on locallab (node5..node7): the stand-in nvidia-smi (tests/fakes) reports an
uncorrected ECC error on node6's GPU; its health gate fails the launch, the batch shell puts
node7 in its place and starts the next attempt at once — same run, same batch shell and port —
and the job trains on node5 and node7. status shows the swap, as on Slurm."""
from __future__ import annotations

import json
import re
import sys

from tests.conftest import ROOT, read_results, submitted
from tests.ssh.helpers import job_log, lab_site, leftovers

FAKES = ROOT / "tests" / "fakes"
HOSTS = ("node5", "node6", "node7")


def test_a_host_with_an_ecc_error_is_replaced_by_the_spare_host(cli, lab, sites, tmp_path):
    # The lab's hosts have no GPU: the stand-in nvidia-smi plays one each (the ranks train on CPU).
    lab_site(sites, "labspares", limits={"max_gpus_per_node": 1, "cpus_per_node": 2})
    job = tmp_path / "spares.yaml"
    job.write_text(json.dumps({
        "name": "ssh-spares", "python": sys.executable, "script": "tests/programs/worker.py",
        "args": ["--seconds", 2, "--report"],
        "setup": [f"export PATH={FAKES}:$PATH FAKE_SMI_GPUS=1 FAKE_SMI_FAULT_node6=ecc:0:3"],
        "resources": {"nodes": 2, "spare_nodes": 1, "gpus_per_node": 1, "procs_per_node": 1}}))
    proc = cli("submit", job, "--site", "labspares", "--wait", check=False, timeout=300)
    job_id, run_dir = submitted(proc.stdout)
    log = job_log(run_dir)
    assert proc.returncode == 0, proc.stdout + proc.stderr + log[-4000:]
    assert json.loads((run_dir / "run.json").read_text())["ssh"]["hosts"] == list(HOSTS)
    assert "nodes: node5,node6 of the hosts node5,node6,node7" in log, log[-4000:]
    assert "node6 failed the health gate" in log and "uncorrected volatile ECC" in log, log[-4000:]
    m = re.search(r"spares: node6 replaced by node7 after the preflight failure, excluding node6; "
                  r"attempt 2 of run (\d+) starts now", log)
    assert m, log[-4000:]
    assert "nodes: node5,node7 of the hosts node5,node6,node7" in log, log[-4000:]
    assert sorted(r["host"] for r in read_results(run_dir)) == ["node5", "node7"]
    [rep] = json.loads(cli("status", str(run_dir), "--json").stdout)["replacements"]
    assert (rep["attempt"], rep["out"], rep["in"], rep["job_id"]) == (1, ["node6"], ["node7"],
                                                                       m.group(1)), rep
    assert rep["back_s"] > 0, rep
    status = cli("status", str(run_dir)).stdout
    assert re.search(r"^replaced  attempt 2 of job \d+: node6 out, node7 in \(preflight failure, "
                     r"excluding node6\); training again \d+ s after the failure$", status, re.M), status
    assert leftovers(run_dir, HOSTS) == {h: [] for h in HOSTS}
