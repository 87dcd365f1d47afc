"""Loading and validating job files: every user mistake gives file:line, key path and a fix."""
from __future__ import annotations

import textwrap

import pytest

from hpctrain.errors import HpctrainError
from hpctrain.job.load import load_job
from hpctrain.schema.spec import slurm_seconds

GOOD = """\
name: cartpole-ppo
site: localcluster
library: command
script: examples/ddp_check.py
args: ["--steps", "10"]
resources:
  nodes: 2
  procs_per_node: 2
  cpus_per_proc: 1
  time: "00:10:00"
env: {OMP_NUM_THREADS: "1"}
"""


def write(tmp_path, text, name="job.yaml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def error_of(path, **kw) -> HpctrainError:
    with pytest.raises(HpctrainError) as info:
        load_job(path, **kw)
    return info.value


def test_good_job_loads_with_site_defaults(tmp_path, home):
    job = load_job(write(tmp_path, GOOD))
    assert job.spec.resources.nodes == 2
    assert job.spec.resources.partition == "debug"  # from the localcluster site defaults
    assert job.site.name == "localcluster"


def test_unknown_key_names_line_and_nearest(tmp_path, home):
    err = error_of(write(tmp_path, GOOD.replace("  nodes: 2", "  nodez: 2")))
    assert err.where.endswith("job.yaml:7")
    assert "unknown key 'nodez' in 'resources'" in err.what
    assert "did you mean 'nodes'?" in err.fix


def test_unknown_top_level_key(tmp_path, home):
    err = error_of(write(tmp_path, GOOD + "scirpt: x.py\n"))
    assert err.where.endswith("job.yaml:12") and "'script'" in err.fix


def test_wrong_type_and_impossible_values(tmp_path, home):
    err = error_of(write(tmp_path, GOOD.replace("nodes: 2", "nodes: two")))
    assert err.where.endswith(":7") and "resources.nodes" in err.what and "int" in err.what
    err = error_of(write(tmp_path, GOOD.replace("nodes: 2", "nodes: 0")))
    assert ">= 1" in err.what and err.where.endswith(":7")


def test_malformed_time(tmp_path, home):
    err = error_of(write(tmp_path, GOOD.replace('"00:10:00"', '"10 minutes"')))
    assert err.where.endswith(":10") and "HH:MM:SS" in err.fix


def test_bad_enum_suggests(tmp_path, home):
    err = error_of(write(tmp_path, GOOD.replace("library: command", "library: rsl-rl")))
    assert err.where.endswith(":3") and "did you mean 'rsl_rl'" in err.fix


def test_site_limits(tmp_path, home):
    err = error_of(write(tmp_path, GOOD.replace("procs_per_node: 2", "procs_per_node: 3")))
    assert "3 ranks x 1 CPUs" in err.what and "localcluster" in err.what
    err = error_of(write(tmp_path, GOOD.replace("nodes: 2", "nodes: 9")))
    assert "at most 4 nodes" in err.what and err.where.endswith(":7")


def test_local_site_is_one_node(tmp_path, home):
    err = error_of(write(tmp_path, GOOD.replace("site: localcluster", "site: local")))
    assert "must be 1" in err.what and "cluster site" in err.fix


def test_yaml_syntax_error_has_line(tmp_path, home):
    err = error_of(write(tmp_path, GOOD.replace("  procs_per_node: 2", "  procs_per_node: [2")))
    assert "not valid YAML" in err.what and err.where.startswith(str(tmp_path))
    assert ":" in err.where.rsplit("job.yaml", 1)[1]


def test_unknown_site_suggests(tmp_path, home):
    err = error_of(write(tmp_path, GOOD.replace("site: localcluster", "site: localclustr")))
    assert "unknown site 'localclustr'" in err.what and "did you mean 'localcluster'" in err.fix


def test_merge_order_site_then_job_then_set(tmp_path, home):
    path = write(tmp_path, GOOD)
    job = load_job(path)
    assert job.spec.resources.mem == "1000M"  # site default
    job = load_job(path, overrides=["resources.mem=2G", "resources.nodes=1"])
    assert job.spec.resources.mem == "2G" and job.spec.resources.nodes == 1
    job = load_job(path, site="local", overrides=["resources.nodes=1"])  # --site wins over the file
    assert job.site.name == "local"


def test_override_errors_point_at_the_flag(tmp_path, home):
    err = error_of(write(tmp_path, GOOD), overrides=["resources.nodes=zero"])
    assert err.where == "--set resources.nodes=zero"


def test_site_from_environment_and_default(tmp_path, home, monkeypatch):
    text = GOOD.replace("site: localcluster\n", "").replace("nodes: 2", "nodes: 1")
    assert load_job(write(tmp_path, text)).site.name == "local"
    monkeypatch.setenv("HPCTRAIN_SITE", "localcluster")
    assert load_job(write(tmp_path, text)).site.name == "localcluster"


def test_user_site_path(tmp_path, home, monkeypatch):
    sites = tmp_path / "sites"
    sites.mkdir()
    (sites / "mycluster.yaml").write_text("name: mycluster\nscheduler: slurm\nlimits: {max_nodes: 2}\n")
    monkeypatch.setenv("HPCTRAIN_SITE_PATH", str(sites))
    job = load_job(write(tmp_path, GOOD.replace("site: localcluster", "site: mycluster")))
    assert job.site.name == "mycluster"


def test_bad_site_profile_names_its_file(tmp_path, home, monkeypatch):
    sites = tmp_path / "sites"
    sites.mkdir()
    (sites / "broken.yaml").write_text("name: broken\nscheduler: slurm\nhead:\n  mode: ip\n")
    monkeypatch.setenv("HPCTRAIN_SITE_PATH", str(sites))
    err = error_of(write(tmp_path, GOOD.replace("site: localcluster", "site: broken")))
    assert err.where.endswith("broken.yaml:4") and "interface" in err.fix


def test_secret_must_not_be_written(tmp_path, home):
    err = error_of(write(tmp_path, GOOD + "secrets: [OMP_NUM_THREADS]\n"))
    assert "secret" in err.what


def test_gpus_mapped_twice_is_an_error(tmp_path, home):
    text = GOOD.replace("site: localcluster", "site: slurm-generic").replace(
        "library: command", "library: rsl_rl").replace("procs_per_node: 2", "procs_per_node: 4\n  gpus_per_node: 2")
    err = error_of(write(tmp_path, text))
    assert "4 ranks per node but 2 GPU(s) per node" in err.what and "NCCL" in err.what
    assert "gpus_per_node: 4" in err.fix


@pytest.mark.parametrize("text,seconds", [("30", 1800), ("1:30", 90), ("02:00:00", 7200),
                                          ("1-00", 86400), ("1-02:03", 93780), ("2-00:00:01", 172801)])
def test_slurm_time(text, seconds):
    assert slurm_seconds(text) == seconds


def test_site_head_mode_needs_its_value(tmp_path, home, monkeypatch):
    sites = tmp_path / "sites"
    sites.mkdir()
    (sites / "nosuffix.yaml").write_text("name: nosuffix\nscheduler: slurm\nhead:\n  mode: suffix\n")
    monkeypatch.setenv("HPCTRAIN_SITE_PATH", str(sites))
    err = error_of(write(tmp_path, GOOD.replace("site: localcluster", "site: nosuffix")))
    assert err.where.endswith("nosuffix.yaml:4") and "suffix" in err.fix
