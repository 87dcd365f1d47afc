"""The command line as a user sees it: `validate`'s summary, warnings once, errors with exit 2."""
from __future__ import annotations

import textwrap



def test_validate_summarises_the_launch_and_warns_once(cli, tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text(textwrap.dedent("""\
        name: cartpole
        library: rsl_rl
        task: Isaac-Cartpole-v0
        isaaclab: /opt/IsaacLab
        resources: {nodes: 2, gpus_per_node: 4, time: "02:00:00"}
        """))
    proc = cli("validate", job, "--site", "slurm-generic")
    out = proc.stdout
    rows = dict(line.strip().split("  ", 1) for line in out.splitlines()
                if "  " in line.strip() and not line.startswith("ok:"))
    assert rows["job"].startswith("cartpole") and rows["library"].strip() == "rsl_rl"
    assert rows["ranks"].strip() == "2 node(s) x 4 = 8"
    assert "--gpus-per-node=4" in rows["resources"] and "--time=02:00:00" in rows["resources"]
    assert "torchrun c10d" in rows["launcher"]
    assert "isaaclab.sh -p <bootstrap> -- /opt/IsaacLab/scripts/reinforcement_learning/rsl_rl/train.py" in rows["program"]
    # The rsl_rl seed trap: shown once, in the summary (not also on stderr, not once per check).
    assert (out + proc.stderr).count("seeds each rank with seed + LOCAL_RANK") == 1
    assert out.rstrip().endswith("ok: the job is valid")


def test_validate_refuses_a_secret_that_is_not_set(cli, tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("name: s\nscript: t.py\nsecrets: [HPCTRAIN_TEST_NOT_SET]\n")
    for command in (["validate", job], ["submit", job, "--dry-run"], ["submit", job]):
        proc = cli(*command, check=False, env={"HPCTRAIN_TEST_NOT_SET": ""})
        assert proc.returncode == 2, (command, proc.stdout, proc.stderr)
        assert f"error: {job}:3: secret(s) HPCTRAIN_TEST_NOT_SET not set" in proc.stderr
        assert "Traceback" not in proc.stderr
    proc = cli("validate", job, env={"HPCTRAIN_TEST_NOT_SET": "value"})
    assert "value" not in proc.stdout


def test_submit_resume_errors_exit_2(cli, tmp_path):
    """`submit --resume RUN` takes no job file or overrides; a run that is not there, or that
    is still going, is refused with a fix, never a traceback."""
    job = tmp_path / "job.yaml"
    job.write_text("name: r\nscript: t.py\n")
    (tmp_path / "t.py").write_text("")
    for args, text in ((["submit"], "submit needs a job file (or --resume RUN)"),
                       (["submit", "--resume", "x", job], "--resume RUN starts that run's own job"),
                       (["submit", "--resume", "nope-nope"], "no run 'nope-nope' found")):
        proc = cli(*args, check=False)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert text in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
