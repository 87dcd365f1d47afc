"""Issue 43, item 4: an ssh site's hosts after the job's are its spares (templates/ssh/spares.sh.j2)
— what validate accepts and refuses, the hosts every command reaches, and the batch shell's job
id that the replacement record carries there."""
from __future__ import annotations

import json

import pytest

from hpctrain.errors import HpctrainError
from hpctrain.job.load import load_job
from hpctrain.rank.before import spares
from hpctrain.rank.records import ExcludedNode, write_excluded

JOB = {"name": "spares", "library": "command", "script": "train.py", "python": "python",
       "resources": {"nodes": 2, "spare_nodes": 1}}


def test_the_hosts_after_the_jobs_are_its_spares(home):
    job = load_job(JOB, site="locallab")  # hosts: node[5-7]
    from hpctrain.backends.ssh.backend import SshBackend
    values = SshBackend.plan_values(job)
    # Every host is probed, started from (connections) and stopped on; the attempts choose 2.
    assert values["hosts"] == ["node5", "node6", "node7"]
    assert values["max_excluded"] == job.spec.preemption.max_excluded_nodes
    plain = SshBackend.plan_values(load_job({**JOB, "resources": {"nodes": 2}}, site="locallab"))
    assert plain["hosts"] == ["node5", "node6"]


def test_more_spares_than_the_site_has_hosts_is_refused_with_the_number_that_fits(home):
    with pytest.raises(HpctrainError) as exc:
        load_job({**JOB, "resources": {"nodes": 2, "spare_nodes": 2}}, site="locallab")
    said = str(exc.value)
    assert "'resources.spare_nodes' is 2" in said and "3 host(s)" in said, said
    assert "ask for 1 spare(s) or fewer" in said, said


def test_on_an_ssh_site_the_record_carries_the_batch_shells_job_id(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.delenv("SLURM_RESTART_COUNT", raising=False)
    monkeypatch.setenv("HPCTRAIN_JOB_ID", "123456")
    hosts = "node5,node6,node7"
    assert spares.main(["pick", str(tmp_path), "2", hosts]) == 0
    write_excluded(str(tmp_path), [ExcludedNode(node="node6", reason="preflight", message="ecc",
                                                time="t", job_id="123456")])
    assert spares.main(["replace", str(tmp_path), "2", hosts, "1", "1", "preflight failure"]) == 0
    assert capsys.readouterr().out.splitlines() == ["node5,node6", "node6 node7"]
    # The next attempt (the same batch shell, exec'd: the same job id) keeps the head.
    assert spares.main(["pick", str(tmp_path), "2", hosts]) == 0
    assert capsys.readouterr().out == "node5,node7\n"
    assert json.loads((tmp_path / "status" / "spares.json").read_text())["job_id"] == "123456"
    [r] = spares.read_replacements(str(tmp_path))
    assert (r["job_id"], r["attempt"], r["out"], r["in"]) == ("123456", 1, ["node6"], ["node7"])


def test_status_names_the_hosts_the_attempt_chose_among_the_runs_own(tmp_path):
    from types import SimpleNamespace

    from hpctrain.backends.ssh.backend import _attempt_hosts
    run = SimpleNamespace(path=tmp_path)
    hosts = ["node5", "node6", "node7"]
    assert _attempt_hosts(run, hosts) == hosts  # before the first choice
    (tmp_path / "status").mkdir()
    spares_json = tmp_path / "status" / "spares.json"
    spares_json.write_text('{"job_id": "1", "chosen": ["node5", "node7"]}')
    assert _attempt_hosts(run, hosts) == ["node5", "node7"]
    # The run directory is untrusted: a host that is not the run's is not shown as one of it.
    spares_json.write_text('{"job_id": "1", "chosen": ["evil", "node6", "$(x)"]}')
    assert _attempt_hosts(run, hosts) == ["node6"]
    spares_json.write_text('[1, 2]')
    assert _attempt_hosts(run, hosts) == hosts
