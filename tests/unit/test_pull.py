"""`hpctrain pull`'s choices and its hostile input, without processes: what each kind and
--checkpoint choose, the size bound, the listing a run directory (or a login node) returns read
as untrusted bytes, the manifest read back, and links where pulled files would go."""
from __future__ import annotations

import json
import os

import pytest

from hpctrain.errors import HpctrainError
from hpctrain.follow import pull, pulled
from hpctrain.follow.pull import Listed, choose
from tests.hostile import tried

FILES = [Listed("run.json", 900, 10), Listed("logs/rank-0.log", 50, 10),
         Listed("status/pid", 5, 10), Listed("code-files.txt", 40, 10),
         Listed("exports/model_2/policy.onnx", 5000, 30), Listed("eval/records.jsonl", 80, 30),
         Listed("videos/play-0.mp4", 9000, 30), Listed("tb/events.out.tfevents.1.h.0", 70, 20),
         Listed("checkpoints/model_9.pt", 100, 20), Listed("checkpoints/model_10.pt", 100, 20),
         Listed("checkpoints/model_8.pt", 100, 19), Listed("checkpoints/.model_11.pt.tmp", 100, 40),
         Listed("checkpoints/model_12.pt", 0, 50), Listed("other/big.bin", 1 << 30, 5),
         Listed("tasks/1/logs/rank-0.log", 5, 1), Listed("tasks/1/run.json", 5, 1),
         Listed("tasks/1/other/x", 5, 1),
         Listed("logs/rsl_rl/cartpole/2026-11-29_10-00-00/videos/train/rl-video-step-0.mp4", 9, 1),
         Listed("logs/rsl_rl/cartpole/2026-11-29_10-00-00/model_5.pt", 9, 1),
         Listed("logs/rsl_rl/cartpole/2026-11-29_10-00-00/params/agent.yaml", 9, 1)]
PATTERNS = ["checkpoints/model_*.pt"]


def paths(found) -> list[str]:
    return [f.path for f in found]


def test_every_kind_chooses_its_folder_and_the_newest_checkpoint_by_default():
    got = paths(choose(FILES, "", list(pull.KINDS), "newest", PATTERNS))
    # Newest: the latest mtime, then the natural order of names (10 after 9); a file being
    # written (hidden, *.tmp) and an empty one never count; other/ is no kind's.
    assert "checkpoints/model_10.pt" in got
    assert not any(p.startswith(("checkpoints/model_9", "checkpoints/model_8", "other/",
                                 "checkpoints/.", "checkpoints/model_12")) for p in got)
    assert {"run.json", "code-files.txt", "logs/rank-0.log", "status/pid",
            "exports/model_2/policy.onnx", "eval/records.jsonl", "videos/play-0.mp4",
            "tb/events.out.tfevents.1.h.0", "tasks/1/logs/rank-0.log", "tasks/1/run.json"} <= set(got)
    assert "tasks/1/other/x" not in got
    # Isaac Lab's log folder: its configuration with the records, not its every checkpoint.
    logs = paths(choose(FILES, "", ["logs"], "none", []))
    assert "logs/rsl_rl/cartpole/2026-11-29_10-00-00/params/agent.yaml" in logs
    assert not any(p.endswith((".pt", ".mp4")) for p in logs), logs


def test_only_and_checkpoint_choices():
    assert paths(choose(FILES, "", ["exports"], "newest", PATTERNS)) == ["exports/model_2/policy.onnx"]
    assert paths(choose(FILES, "", ["videos"], "newest", PATTERNS)) == [
        "logs/rsl_rl/cartpole/2026-11-29_10-00-00/videos/train/rl-video-step-0.mp4", "videos/play-0.mp4"]
    assert paths(choose(FILES, "", ["checkpoint"], "all", PATTERNS)) == [
        "checkpoints/model_10.pt", "checkpoints/model_8.pt", "checkpoints/model_9.pt"]
    assert paths(choose(FILES, "", ["checkpoint"], "model_8.pt", PATTERNS)) == ["checkpoints/model_8.pt"]
    assert choose(FILES, "", ["checkpoint"], "none", PATTERNS) == []
    with pytest.raises(HpctrainError, match=r"no checkpoint named 'model_7.pt' \(the newest: .*model_10.pt"):
        choose(FILES, "", ["checkpoint"], "model_7.pt", PATTERNS)


def test_a_trials_kinds_are_read_inside_its_folder():
    files = [Listed("trials/0003/logs/rank-0.log", 5, 1), Listed("trials/0003/run.json", 5, 1),
             Listed("trials/0004/run.json", 5, 1), Listed("study/journal.log", 5, 1),
             Listed("trials/0003/checkpoints/model_1.pt", 5, 1)]
    got = paths(choose(files, "trials/0003", ["logs", "checkpoint"], "newest", PATTERNS))
    assert got == ["trials/0003/checkpoints/model_1.pt", "trials/0003/logs/rank-0.log",
                   "trials/0003/run.json"]


def test_glob_stays_in_one_folder_as_the_rank_side_reads_it():
    assert pull._glob("logs/rsl_rl/*/*/model_*.pt").fullmatch("logs/rsl_rl/a/b/model_3.pt")
    assert not pull._glob("logs/rsl_rl/*/*/model_*.pt").fullmatch("logs/rsl_rl/a/b/c/model_3.pt")
    assert pull._glob("**/ckpt/*.pth").fullmatch("x/y/ckpt/a.pth")
    assert not pull._glob("checkpoints/*").fullmatch("checkpoints/a/b")


@pytest.mark.parametrize("text,want", [("500M", 500 << 20), ("20G", 20 << 30), ("1.5T", int(1.5 * (1 << 40))),
                                       ("4096", 4096), ("2GiB", 2 << 30), ("10k", 10 << 10)])
def test_sizes(text, want):
    assert pull.parse_size(text) == want


@pytest.mark.parametrize("text", ["", "ten", "-1G", "5 PB", "1e9", "5G; rm -rf /"])
def test_a_size_that_is_not_one_is_refused(text):
    with pytest.raises(HpctrainError, match="is not a size"):
        pull.parse_size(text)


@pytest.mark.parametrize("name", ["a", "logs/rank-0.log", "exports/m_2/policy.onnx",
                                  "tb/events.out.tfevents.1700000000.host.1.0", "a+b=c,d@e"])
def test_plain_names_are_copied(name):
    assert pulled.good_name(name)


@pytest.mark.parametrize("name", ["", ".", "..", "../x", "a/../b", "a/./b", "/etc/passwd", ".hidden",
                                  "a/.partial", "-e", "a/-rf", "a b", "a\nb", "a\\b", "a//b", "a/",
                                  "a:b", "caf\u00e9", "a'b", 'a"b', "a;b", "$(id)", "a*", "x" * 2000,
                                  "/".join(["a"] * 40)])
def test_odd_names_are_not(name):
    tried("pull names")
    assert not pulled.good_name(name)


class Listing:
    """A listing's bytes as the run directory's host returned them (anyone may have named the
    files): only the parsing is under test here; tests/local lists real directories."""

    root = shown = "/far/run"

    def __init__(self, out: bytes, status: int = 0):
        self.out, self.status = out, status

    def shell(self, script, args, input=b"", limit=0, timeout=0):
        return self.status, self.out, ""


def test_a_hostile_listing_is_read_as_data():
    out = b"\0".join([b"5 1700000000.5 ./exports/a.onnx", b"7 1700000001 ./logs/x y.log",
                      b"9 17 ./../../etc/passwd", b"9 17 ./a/\n/b", b"x 17 ./a", b"99999999999999999999 1 ./big",
                      b"3 1 ./\xff\xfe", b"3 1 ./.hidden/x", b"3 1 ./-rf", b"4 2 ./eval/r.json", b""])
    files, skipped = pull.listing(Listing(out), [""])
    tried("pull listing", 9)
    assert files == [Listed("exports/a.onnx", 5, 1700000000), Listed("eval/r.json", 4, 2)]
    assert len(skipped) == 7 and all(s.isprintable() for s in skipped)  # hidden: not said


def test_a_listing_past_the_bound_is_refused():
    out = b"".join(b"1 1 ./f%d\0" % i for i in range(pull.MAX_FILES + 1))
    with pytest.raises(HpctrainError, match="more than 100000 files"):
        pull.listing(Listing(out), [""])
    with pytest.raises(HpctrainError, match="is not there"):
        pull.listing(Listing(b"", status=3), [""])


def test_the_size_bound_says_what_the_selection_would_be(tmp_path, monkeypatch):
    big = [Listed("exports/a.onnx", 3 << 30, 1), Listed("exports/b.onnx", 1 << 30, 1)]
    monkeypatch.setattr(pull, "source_of", lambda run: Listing(b""))
    monkeypatch.setattr(pull, "listing", lambda src, scopes: (big, []))
    with pytest.raises(HpctrainError, match=r"4.0 GiB in 2 files, over --max-size 1.0 GiB; largest: "
                                            r"exports/a.onnx \(3.0 GiB\)") as exc:
        pull.pull(None, tmp_path / "out", ["exports"], max_size=1 << 30)
    assert "--max-size 4G" in exc.value.fix
    assert not (tmp_path / "out").exists()  # refused before anything was made


def manifest(dest, files) -> None:
    (dest / pulled.MANIFEST).write_text(json.dumps({"files": files}))


def test_the_manifest_is_read_back_checked(tmp_path):
    good = {"path": "a/b", "size": 3, "sha256": "0" * 64}
    manifest(tmp_path, [good])
    assert pulled.read_manifest(tmp_path) == {"a/b": pulled.Entry("a/b", 3, "0" * 64)}
    for bad in ({**good, "path": "../../x"}, {**good, "size": -1}, {**good, "size": True},
                {**good, "sha256": "zz"}, {**good, "path": "a\nb"}, "a/b", None):
        tried("pull manifest")
        manifest(tmp_path, [bad])
        with pytest.raises(HpctrainError, match=r"files\[0\].*is not a path, size and sha256"):
            pulled.read_manifest(tmp_path)
    (tmp_path / pulled.MANIFEST).write_text("[1, 2")
    with pytest.raises(HpctrainError, match="not JSON"):
        pulled.read_manifest(tmp_path)


def test_a_manifest_that_is_a_link_or_too_large_is_refused(tmp_path):
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps({"files": []}))
    dest = tmp_path / "d"
    dest.mkdir()
    os.symlink(target, dest / pulled.MANIFEST)
    with pytest.raises(HpctrainError, match="not a regular file"):
        pulled.read_manifest(dest)
    os.unlink(dest / pulled.MANIFEST)
    with open(dest / pulled.MANIFEST, "wb") as f:
        f.truncate(pulled.MAX_MANIFEST + 1)
    with pytest.raises(HpctrainError, match="larger than"):
        pulled.read_manifest(dest)


def test_no_pulled_file_goes_through_a_link_here(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "d"
    dest.mkdir()
    os.symlink(outside, dest / "exports")
    with pytest.raises(HpctrainError, match="never writes through one"):
        pulled.check_target(dest, "exports/a.onnx")
    (dest / "eval").mkdir()
    os.symlink(outside / "x", dest / "eval" / "r.json")
    with pytest.raises(HpctrainError, match="is a symbolic link"):
        pulled.check_target(dest, "eval/r.json")
    os.mkfifo(dest / "eval" / "fifo")
    with pytest.raises(HpctrainError, match="not a regular file"):
        pulled.check_target(dest, "eval/fifo")
    assert pulled.check_target(dest, "videos/new.mp4") is None


def test_best_is_the_best_evaluated_checkpoint_never_a_training_reward(tmp_path):
    from hpctrain.rank.after.evaluate import record_name
    from hpctrain.runs.records import Run
    d = tmp_path / "runs" / "x" / "20240101-000000-abcd"
    (d / "eval").mkdir(parents=True)
    (d / "run.json").write_text(json.dumps(dict(run_id=d.name, name="x", site="local",
                                                backend="local", job_id="local-1", state="COMPLETED")))
    run = Run(d)
    with pytest.raises(HpctrainError, match=r"(?s)no evaluation.*hpctrain eval .* --checkpoint all"):
        pull.best_checkpoint(run, pull.Here(d))

    def evaluated(checkpoint: str, mean_return: float) -> None:
        (d / "eval" / record_name(checkpoint)).write_text(json.dumps({
            "format": 1, "checkpoint": checkpoint, "iteration": None, "status": "ok",
            "mean_return": mean_return, "episode_length": 9.0, "success_rate": None,
            "episodes": 4, "method": "play", "seed": 1, "evaluated": "2026-01-01T00:00:00",
            "eval_run": "20260102-000000-eval", "error": None}))
    evaluated("checkpoints/model_8.pt", 2.0)
    evaluated("checkpoints/model_9.pt", 5.0)
    best = pull.best_checkpoint(run, pull.Here(d))
    assert best == "checkpoints/model_9.pt"
    assert paths(choose(FILES, "", ["checkpoint"], best, PATTERNS)) == [best]
    evaluated("../../../etc/passwd", 9.0)  # a hostile record: never a path pull copies
    with pytest.raises(HpctrainError, match="not a checkpoint inside the run"):
        pull.best_checkpoint(run, pull.Here(d))
