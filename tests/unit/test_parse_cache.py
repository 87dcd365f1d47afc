"""What makes a warm `hpctrain render` cheap must give exactly what the slow path gives: the kept
parse of a job file (yamlfile._parsed) and the --set fast path for plain integers."""
import os

import pytest
import yaml

from hpctrain.errors import HpctrainError
from hpctrain.spec import parse_override
from hpctrain.yamlfile import load_file, load_text

TEXT = "name: a  # c\nresources:\n  nodes: 2\n  time: '01:00:00'\nargs: [1, -0.5, x, null, true]\nenv: {A: 1e3}\n"


def test_kept_parse_is_the_parse(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    job = tmp_path / "job.yaml"
    job.write_text(TEXT)
    first, second = load_file(job), load_file(job)
    assert list((tmp_path / "cache" / "hpctrain" / "yaml").iterdir())  # kept
    want = load_text(TEXT, str(job))
    for doc in (first, second):
        assert dict(doc) == dict(want) and doc.lines == want.lines and doc.source == str(job)
        assert [type(v) for v in doc["args"]] == [int, float, str, type(None), bool]


def test_edited_file_is_parsed_again(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    job = tmp_path / "job.yaml"
    job.write_text(TEXT)
    load_file(job)
    job.write_text(TEXT.replace("nodes: 2", "nodes: 3"))
    assert load_file(job)["resources"]["nodes"] == 3
    job.write_text(TEXT + "name: b\n")  # errors are never kept: refused every time
    for _ in range(2):
        with pytest.raises(HpctrainError, match="given twice"):
            load_file(job)


def test_corrupt_entry_is_ignored(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    job = tmp_path / "job.yaml"
    job.write_text(TEXT)
    load_file(job)
    for entry in (tmp_path / "cache" / "hpctrain" / "yaml").iterdir():
        entry.write_bytes(b"\x93garbage")
    assert load_file(job)["resources"]["nodes"] == 2


def test_values_msgpack_would_change_are_not_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    job = tmp_path / "job.yaml"
    job.write_text("name: a\nwhen: 2024-01-01\nbits: !!set {a: null}\n")
    doc = load_file(job)
    assert not os.listdir(tmp_path / "cache" / "hpctrain" / "yaml")
    assert load_file(job) == doc


@pytest.mark.parametrize("raw", ["2", "4096", "10", "0", "017", "0x1F", "1_000", "1:30", "+3",
                                 "-3", "3.0", "1e3", " 5", "5 ", "99999999999999999999", "yes"])
def test_set_fast_path_reads_as_yaml(raw):
    assert parse_override(f"resources.nodes={raw}") == (("resources", "nodes"), yaml.safe_load(raw))


def test_cache_keys_are_sha256():
    """hpctrain.sha is CPython's own SHA-256 (no OpenSSL import): the digests hashlib gives."""
    import hashlib
    from hpctrain.sha import sha256
    for data in (b"", b"abc", bytes(range(256)) * 300):
        assert sha256(data).hexdigest() == hashlib.sha256(data).hexdigest()
        h = sha256(data[:7])
        h.update(data[7:])
        assert h.hexdigest() == hashlib.sha256(data).hexdigest()
