"""`hpctrain shell`, `launch` and `attach`: the commands they build and the errors they give,
without a cluster (tests/slurm/test_interactive.py runs them for real)."""
from __future__ import annotations

from pathlib import Path

import pytest

from hpctrain.backends.slurm.interactive import (attach_command, on_nodes_command, salloc_options,
                                                 shell_command)
from hpctrain.cli import main
from hpctrain.follow.attach import _dump
from hpctrain.interactive import prepare_shell
from hpctrain.job.load import load_job

JOB = {"name": "dbg", "library": "command", "script": "train.py", "python": "python",
       "resources": {"nodes": 2, "procs_per_node": 2, "time": "00:20:00"}}


def test_salloc_gets_the_jobs_directives_without_the_batch_only_ones(home):
    prep, _, _ = prepare_shell(load_job(dict(JOB, sbatch={"reservation": "mine"}),
                                        site="localcluster"))
    opts = salloc_options(prep.plan.directives)
    assert opts[:4] == ["--job-name=dbg", "--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=2"]
    assert {"--time=00:20:00", "--partition=debug", "--mem=1000M", "--reservation=mine"} <= set(opts)
    # A batch log, requeue and the batch shell's signal mean nothing to salloc (it refuses them).
    assert not [o for o in opts if o.split("=")[0] in ("--output", "--open-mode", "--requeue",
                                                       "--signal")]


def test_the_shell_runs_on_the_first_node_beside_every_step_and_records_the_job_id(home):
    prep, _, _ = prepare_shell(load_job(JOB, site="localcluster"))
    cmd = shell_command(prep.plan, Path("/r/shell.rc"), Path("/r/status/allocation"))
    salloc_end = cmd.index("bash")
    assert cmd[0] == "salloc" and cmd[1:salloc_end] == salloc_options(prep.plan.directives)
    wrapper = cmd[salloc_end:salloc_end + 5]
    assert wrapper[:2] == ["bash", "-c"] and wrapper[3:] == ["hpctrain-shell", "/r/status/allocation"]
    step = cmd[salloc_end + 5:]
    assert step[:4] == ["srun", "--pty", "--overlap", "--relative=0"]
    assert step[-4:] == ["bash", "--rcfile", "/r/shell.rc", "-i"]


def test_attach_and_every_node_are_steps_of_the_running_job():
    assert attach_command("12", "node2", "/runs/x/1") == [
        "srun", "--jobid=12", "--overlap", "--pty", "--nodes=1", "--ntasks=1",
        "--nodelist=node2", "--chdir=/runs/x/1", "bash", "-i"]
    assert on_nodes_command("12", ["node1", "node2"], ["py", "-m", "hpctrain.rank"]) == [
        "srun", "--jobid=12", "--overlap", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1",
        "--nodelist=node1,node2", "py", "-m", "hpctrain.rank"]


def test_the_rcfile_and_the_launch_are_the_batch_scripts_parts(home):
    prep, rc, launch = prepare_shell(load_job(JOB, site="localcluster"))
    batch = prep.script
    # The launch is the batch script's own (steps.sh.j2), without requeue or preemption.
    def launch_line(text):
        start = text.index("LAUNCH=(")
        return text[start:text.index(")\n", start)]
    assert launch_line(launch) == launch_line(batch) and "srun --nodes=" in launch_line(launch)
    assert "scontrol requeue" not in launch and "scontrol requeue" in batch
    assert "trap 'on_stop INT' INT" in launch  # Ctrl-C stops the launch, the ranks save
    # The shell: the job's environment and the launch's exports, then a forgiving shell.
    assert "export HPCTRAIN_RUN_DIR=" in rc and "export HPCTRAIN_PORT=$PORT" in rc
    assert rc.rstrip().splitlines()[-1].startswith("PS1='[dbg] '")
    assert "set +e +u +o pipefail" in rc and "LAUNCH=" not in rc


def test_on_the_local_site_the_launch_is_the_job_script_itself(home):
    prep, rc, launch = prepare_shell(load_job(dict(JOB, resources={"procs_per_node": 2}),
                                              site="local"), "RUN_ID")
    assert launch == prep.script
    assert "export HPCTRAIN_RUN_DIR=" in rc and "set +e +u +o pipefail" in rc


@pytest.mark.parametrize("argv,said", [
    (["shell", "JOB", "--site", "./rsync.yaml"], "hpctrain shell needs the run directory shared with the hosts"),
    (["shell", "SECRET", "--site", "locallab"], "cannot reach a shell on site 'locallab' on its hosts"),
    (["shell", "SWEEP", "--site", "localcluster"], "not a sweep"),
    (["launch"], "hpctrain launch runs in the shell of `hpctrain shell JOB`"),
    (["attach", "x", "--stacks", "--rank", "1"], "--stacks prints every rank's stack"),
])
def test_errors_say_what_to_do_and_exit_2(argv, said, home, tmp_path, capsys, monkeypatch):
    import yaml
    (tmp_path / "JOB").write_text(yaml.safe_dump(dict(JOB, resources={"nodes": 1})))
    (tmp_path / "SWEEP").write_text(yaml.safe_dump(dict(JOB, sweep={"seeds": [1, 2]})))
    (tmp_path / "SECRET").write_text(yaml.safe_dump(dict(JOB, resources={"nodes": 1},
                                                         secrets=["MY_TOKEN"])))
    lab = yaml.safe_load((Path(__file__).parents[2] / "site_configs" / "locallab.yaml").read_text())
    (tmp_path / "rsync.yaml").write_text(yaml.safe_dump(dict(lab, name="lab-rsync", sync="rsync")))
    monkeypatch.setenv("MY_TOKEN", "s3cr3t-value")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HPCTRAIN_RUN_DIR", raising=False)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "\nerror: " in "\n" + err and said in err and "fix:" in err and "Traceback" not in err
    assert "s3cr3t-value" not in err


DUMP = """step 7 of rank 1
Thread 0x00007f1e2b7fe6c0 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 320 in wait

Current thread 0x00007f1e3c2b5740 (most recent call first):
  File "/work/tests/programs/worker.py", line 30 in main
  File "/work/tests/programs/worker.py", line 45 in <module>
  File "/runs/x/rank/before/bootstrap.py", line 450 in main

step 8 of rank 1\x1b[2J
"""


def test_a_dump_is_cut_from_the_log_around_it():
    lines = _dump(DUMP)
    assert lines[0].startswith("Thread 0x00007f1e2b7fe6c0") and lines[-1].endswith("in main")
    assert len(lines) == 7 and not any("step" in line for line in lines)
    assert _dump("Current thread 0x1 (most recent call first):\n  File \"\x1b]0;x\", line 1 in f\n") \
        == ["Current thread 0x1 (most recent call first):", '  File "\\x1b]0;x", line 1 in f']
    assert _dump("no dump here\n") == []


def test_the_allocation_file_is_read_as_untrusted_data(tmp_path):
    # A shared run directory: a pipe must not hang `hpctrain launch` or status, a huge file not
    # fill memory, and only a job id the backend's pattern accepts is taken.
    import os
    from types import SimpleNamespace
    from hpctrain.interactive import ALLOCATION, _allocation
    run = SimpleNamespace(path=tmp_path, record=SimpleNamespace(backend="slurm"))
    where = tmp_path / ALLOCATION
    where.parent.mkdir(parents=True)
    os.mkfifo(where)
    assert _allocation(run) is None
    where.unlink()
    where.write_text("4242\n" + "x" * 10_000)
    assert _allocation(run) is None
    where.write_text("4242; touch /tmp/owned\n")
    assert _allocation(run) is None
    where.write_text("4242\n")
    assert _allocation(run) == "4242"


def test_secrets_are_refused_for_a_shell_through_a_login_host(home, tmp_path, capsys, monkeypatch):
    """submit hands secrets to the login node's sbatch on ssh's standard input; an interactive
    session's is the terminal, so a shell through a login host refuses a job with secrets
    (before any connection) and says what to do instead."""
    import yaml
    site = yaml.safe_load((Path(__file__).parents[2] / "site_configs" / "localcluster.yaml").read_text())
    site.update(name="far", login="me@login.example", remote={"runs_dir": "/scratch/me/runs"})
    (tmp_path / "far.yaml").write_text(yaml.safe_dump(site))
    (tmp_path / "JOB").write_text(yaml.safe_dump(dict(JOB, secrets=["MY_TOKEN"])))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MY_TOKEN", "s3cr3t-value")
    assert main(["shell", "JOB", "--site", str(tmp_path / "far.yaml")]) == 2
    out, err = capsys.readouterr()
    assert "secrets (MY_TOKEN) cannot reach a shell on site 'far' through its login host" in err, err
    assert "fix: " in err and "s3cr3t-value" not in out + err


def test_attach_enters_a_podman_or_docker_rank_container_by_its_labels(tmp_path):
    """Only the names hpctrain runs become the attach step's tool: a job.yaml (run-directory
    data) naming anything else, or another runtime, gets the node's own shell."""
    from hpctrain.runs.untrusted import job_container_tool
    cmd = attach_command("12", "node2", "/runs/x/1", "podman")
    assert cmd[:8] == ["srun", "--jobid=12", "--overlap", "--pty", "--nodes=1", "--ntasks=1",
                       "--nodelist=node2", "--chdir=/runs/x/1"]
    assert cmd[8:10] == ["bash", "-c"] and cmd[-2:] == ["hpctrain-attach", "podman"]
    assert 'label=hpctrain.node=$SLURMD_NODENAME' in cmd[10]
    for runtime, tool in [("podman", "podman"), ("docker", "docker"), ("apptainer", None),
                          ("pyxis", None), ("podman; rm -rf ~", None), (["podman"], None)]:
        (tmp_path / "job.yaml").write_text(f"name: x\ncontainer: {{runtime: {runtime!r}}}\n"
                                           if isinstance(runtime, str) else
                                           "name: x\ncontainer: {runtime: [podman]}\n")
        assert job_container_tool(tmp_path) == tool, runtime
    (tmp_path / "job.yaml").write_text("name: x\n")
    assert job_container_tool(tmp_path) is None
