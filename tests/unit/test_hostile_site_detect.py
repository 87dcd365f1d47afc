"""`site detect` writes what scontrol, sinfo and the probe's nodes say into a site profile
(issue 50): an escape in the Slurm version used to reach the profile's comment, and the profile
then refused its own file. Whatever the tools print (newlines, control characters, YAML's own
syntax, terminal escapes, huge or odd numbers), the profile written always loads as every site
does, its comments and TODO lines are printable, and no tool's text adds a key.
"""
from __future__ import annotations

import copy
import io
import re
from contextlib import redirect_stderr, redirect_stdout

import pytest
import yaml

from hpctrain.backends.slurm.detect import decide, scontrol_config, sinfo_partitions
from hpctrain.cli import main
from hpctrain.job.checks import check_site
from hpctrain.schema.spec import convert_site
from hpctrain.schema.yamlfile import load_file
from tests.hostile import tried
from tests.unit.test_site_detect_decide import CONFIG, SINFO, evidence

# Text a tool could print where a name or a version belongs.
HOSTILE = [
    "23.02.7\nname: evil", "23.02.7\r\nscheduler: local", "23.02.7\x1b[31m", "\x1b]52;c;ZXZpbA==\x07",
    "\x1b]8;;http://x\x07link\x1b]8;;\x07", "\x9b31m", "23.02\x00\x07\x08\x7f", "\u202egnp.exe",
    "a\u2028b\u2029c\x85d", "x: [y", "{z", "&anchor *alias", "!!python/object:os.system",
    "'\"`$(id)", "# not a comment", "--- \n...", "key: value #", "\t\v\f", "é中🙂", "",
    "9" * 5000, "²³", "-1", "a" * 3000,
]
RAW = ("\x1b", "\x9b", "\x07", "\x00", "\r", "\u202e", "\u2028", "\x85")


def _loads(tmp_path, text: str) -> dict:
    """The written profile through the loader every site goes through (as `--site FILE`)."""
    path = tmp_path / "s.yaml"
    path.write_text(text)
    doc = load_file(path)
    check_site(convert_site(doc), doc)
    return dict(doc)


def _keys(doc, prefix=()) -> set:
    out = set()
    for key, value in doc.items():
        out.add(prefix + (key,))
        if isinstance(value, dict):
            out |= _keys(value, prefix + (key,))
    return out


def _printable(text: str, todo: list[str]) -> None:
    for ch in RAW:
        assert ch not in text and not any(ch in t for t in todo), (ch, text)
    assert all(line.isprintable() for line in text.split("\n")), text


def _decided(config=CONFIG, sinfo=SINFO, probe=None, partition=None):
    return decide("big", config, sinfo_partitions(sinfo), partition, probe, ["python"])


CLEAN_KEYS = _keys(yaml.safe_load(_decided()[0]))


@pytest.mark.parametrize("version", HOSTILE)
def test_a_hostile_slurm_version_never_breaks_the_profile(tmp_path, version):
    """scontrol's SLURM_VERSION (the case of the report), read as scontrol prints it and given
    to decide() as it is: the profile loads, every line is printable, and the version adds no
    key (slurm_version is written only for a release)."""
    tried("site detect")
    for config in (scontrol_config(f"ClusterName = big\nSLURM_VERSION = {version}\n"),
                   dict(CONFIG, SLURM_VERSION=version)):
        text, todo = _decided(config)
        doc = _loads(tmp_path, text)
        _printable(text, todo)
        assert _keys(doc) <= CLEAN_KEYS, _keys(doc) - CLEAN_KEYS
        assert doc["scheduler"] == "slurm" and doc["name"] == "big"
        # Only a release is written as a key (scontrol's line ends at a newline: 23.02.7).
        assert re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", doc.get("slurm_version", "0.0.0"))
        assert text.splitlines()[1].startswith("# (Slurm "), text


def _some(n: int, k: int) -> list[str]:
    """k of the hostile texts for the n-th field, in turn: every text is tried, each decide and
    load costing ~10 ms."""
    return [HOSTILE[(n * k + j) % len(HOSTILE)] for j in range(k)]


def test_every_field_of_scontrol_and_sinfo_with_hostile_text_still_loads(tmp_path):
    keys = ["ClusterName", "SLURM_VERSION", "SelectType", "GresTypes", "PreemptType",
            "PreemptMode", "KillWait", "SlurmctldParameters", "PreemptParameters", "MaxArraySize"]
    for n, key in enumerate(keys):
        for value in _some(n, 3):
            tried("site detect")
            text, todo = _decided(dict(CONFIG, **{key: value}))
            _loads(tmp_path, text)
            _printable(text, todo)
    for column in range(7):
        for value in _some(column, 4):
            tried("site detect")
            lines = SINFO.splitlines()
            cells = lines[0].split("|")
            cells[column] = value.replace("|", "/").replace("\n", " ").replace("\r", " ")
            lines[0] = "|".join(cells)
            sinfo = "\n".join(lines)
            chosen = [p for p in sinfo_partitions(sinfo) if column == 0 and p not in ("gpu", "cpu")]
            for partition in (None, *chosen):  # the default one, and a hostile one by name
                text, todo = _decided(sinfo=sinfo, partition=partition)
                doc = _loads(tmp_path, text)
                _printable(text, todo)
                written = doc.get("defaults", {}).get("resources", {}).get("partition")
                assert written in (None, "gpu", "cpu") or written.isascii() and \
                    written.isprintable() and "?" not in written, written


PROBE_STRINGS = [("facts", 0, "python", "executable"), ("facts", 0, "python", "version"),
                 ("facts", 0, "infiniband", 0, "name"), ("facts", 0, "gpus", "gpus", 0, "name"),
                 ("facts", 0, "modules", "inits", 0), ("job",), ("port",),
                 ("facts", 0, "interfaces", 1, "name"), ("facts", 0, "interfaces", 1, "ipv4"),
                 ("facts", 0, "interfaces", 2, "name"), ("reach", 1, "results", 0, "target"),
                 ("reach", 1, "results", 1, "target"), ("reach", 1, "results", 1, "error"),
                 ("reach", 1, "results", 0, "address")]


@pytest.mark.parametrize("reached", [{"g01": True, "g01-ib": False, "10.0.0.1": True},
                                     {"g01": False, "g01-ib": True, "10.0.0.1": True},
                                     {"g01": False, "g01-ib": False, "10.0.0.1": True}])
def test_what_the_probes_nodes_say_never_breaks_the_profile(tmp_path, reached):
    """Each string of the probe's records (node facts, reachability) hostile in turn, for each
    head mode decide() can choose (nodename, suffix, interface): an interface or suffix that is
    no name becomes no key, a module init file not on the probe's own list is not written."""
    for n, path in enumerate(PROBE_STRINGS):
        for value in _some(n, 2):
            tried("site detect")
            probe = copy.deepcopy(evidence(reached))
            at = probe
            for step in path[:-1]:
                at = at[step]
            if path[-1] == "target" and at[path[-1]].startswith("g01"):
                value_here = at[path[-1]] + value  # a name that extends the head's
            else:
                value_here = value
            at[path[-1]] = value_here
            text, todo = _decided(probe=probe)
            doc = _loads(tmp_path, text)
            _printable(text, todo)
            head = doc.get("head", {})
            for key in ("interface", "suffix"):
                assert head.get(key) is None or head[key].isascii() and head[key].isprintable()
            assert doc.get("module_init") in (None, "/usr/share/lmod/lmod/init/bash")


def test_odd_counts_from_sinfo_become_todo_lines_not_invalid_keys(tmp_path):
    """A node count, CPU count or GPU count the schema cannot take (0, past MAX_COUNT, digits
    that are not ASCII) is left to the user as a TODO."""
    sinfo = ("gpu*|2-00:00:00|0|0|512000|gpu:a100:99999999(S:0-1)|g[01-10]\n"
             "cpu|30:00|40|32|256000|(null)|c[01-40]\n")
    text, todo = _decided(sinfo=sinfo)
    doc = _loads(tmp_path, text)
    assert "max_nodes" not in doc["limits"] and "cpus_per_node" not in doc["limits"]
    assert "max_gpus_per_node" not in doc["limits"]
    assert sum("fill it in by hand" in t for t in todo) == 3, todo
    text, todo = _decided(sinfo="gpu*|1:00:00|²|³|512000|gpu:a100:4|g01\n")
    assert "max_nodes" not in _loads(tmp_path, text)["limits"]


def test_site_detect_through_the_cli_with_hostile_tools_writes_a_profile_that_loads(
        tmp_path, monkeypatch):
    """The real command, its scontrol and sinfo programs on PATH printing escapes, newlines
    and YAML in the version, the cluster's name and the partition: exit 0, the profile it wrote
    loads (the command itself loads it again before saying so), nothing raw on the terminal."""
    tried("site detect")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(
        "#!/bin/sh\n"
        r"printf 'ClusterName = big\033]52;c;ZXZpbA==\007: [x\n'" "\n"
        r"printf 'SLURM_VERSION = 24.11.5\033[31m\r#\001{\n'" "\n"
        r"printf 'SelectType = select/cons_tres\nMaxArraySize = 1001\n'" "\n")
    (bin_dir / "sinfo").write_text(
        "#!/bin/sh\n"
        r"printf 'gpu\033[2J*|1-00:00:00|4|64|512000|gpu:a100:4|g[01-04]\n'" "\n")
    for tool in ("scontrol", "sinfo"):
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("HPCTRAIN_RUNS_DIR", str(tmp_path / "runs"))
    out_file = tmp_path / "hx.yaml"
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main(["site", "detect", "hx", "--no-probe", "--out", str(out_file)])
    assert rc == 0, (out.getvalue(), err.getvalue())
    assert "(valid)" in out.getvalue() and "TODO:" in out.getvalue()
    for ch in RAW:
        assert ch not in out.getvalue() and ch not in err.getvalue(), ch
    doc = _loads(tmp_path, out_file.read_text())
    assert doc["name"] == "hx" and "slurm_version" not in doc
    assert "defaults" not in doc  # 'gpu?[2J' is no partition's name: a TODO instead
    assert "sinfo names the partition 'gpu?[2J'" in out.getvalue()
    _printable(out_file.read_text(), [])


@pytest.mark.parametrize("damage", ["facts-not-records", "fact-without-python", "node-a-number",
                                    "reach-a-string", "port-a-word", "python-a-list"])
def test_probe_records_of_another_shape_end_in_one_error(tmp_path, monkeypatch, damage):
    """The probe job's records are the nodes' output: records of a shape probe.py never writes
    (a fact that is a list, a missing key, a number where a name goes) end `site detect` with
    one error and its fix, exit 2, never a traceback."""
    tried("site detect")
    probe = copy.deepcopy(evidence({"g01": True, "g01-ib": False, "10.0.0.1": True}))
    if damage == "facts-not-records":
        probe["facts"] = [["node", "g01"]] * 2
    elif damage == "fact-without-python":
        del probe["facts"][0]["python"]
    elif damage == "node-a-number":
        probe["facts"][0]["node"] = {"n": 1}
    elif damage == "reach-a-string":
        probe["reach"] = ["peer"] * 2
    elif damage == "port-a-word":
        probe["port"] = {"p": "x"}
    else:
        probe["facts"][0]["python"] = ["py"]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text("#!/bin/sh\nprintf 'ClusterName = big\\nSLURM_VERSION = 24.11.5\\n'\n")
    (bin_dir / "sinfo").write_text("#!/bin/sh\nprintf 'gpu*|1-00:00:00|4|64|512000|gpu:a100:4|g[01-04]\\n'\n")
    for tool in ("scontrol", "sinfo"):
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("HPCTRAIN_RUNS_DIR", str(tmp_path / "runs"))
    from hpctrain.backends.slurm import detect
    monkeypatch.setattr(detect, "run_probe", lambda *a, **k: probe)
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main(["site", "detect", "hx", "--out", str(tmp_path / "hx.yaml")])
    text = out.getvalue() + err.getvalue()
    if rc == 0:  # a damage decide() does not read: the profile it wrote loads
        _loads(tmp_path, (tmp_path / "hx.yaml").read_text())
    else:
        assert rc == 2 and "error: " in err.getvalue() and "unexpectedly" not in text, text
