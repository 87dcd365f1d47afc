"""Watching a run, the parts that need the `watch` extra (TensorBoard's event-file reader,
matplotlib): curves stitched across attempts from real TensorBoard event files, the PNG drawn
from them, and a run's handle that shows both."""
from __future__ import annotations

import struct
from pathlib import Path

import pytest

from hpctrain.errors import HpctrainError
from hpctrain.follow.curves import attempts, choose, read_run, read_session
from hpctrain.rank.records import Progress, RunRecord, write_progress
from hpctrain.runs.records import Run


def write_events(directory: Path, points: list[tuple[int, float, float]], tag: str = "reward") -> None:
    """A real event file (TensorBoard's own writer), with the given (step, wall time, value)."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
    writer = EventFileWriter(str(directory))
    for step, wall, value in points:
        summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])
        writer.add_event(event_pb2.Event(wall_time=wall, step=step, summary=summary))
    writer.close()


def test_a_resumed_attempt_supersedes_what_the_preempted_one_logged_after_its_checkpoint(tmp_path):
    # Attempt 1 logged steps 1..10 and was preempted; its checkpoint was at step 6. Attempt 2
    # (a new writer, in a new Isaac Lab-style folder) resumed at 7 and ran to 15.
    write_events(tmp_path / "logs" / "a", [(s, 100.0 + s, float(s)) for s in range(1, 11)])
    write_events(tmp_path / "logs" / "b", [(s, 500.0 + s, 10.0 * s) for s in range(7, 16)])
    [scalars] = read_run(str(tmp_path))
    curve = scalars.curve("reward")
    assert curve.steps == list(range(1, 16))
    assert curve.values[:6] == [1, 2, 3, 4, 5, 6] and curve.values[6:] == [10.0 * s for s in range(7, 16)]
    assert curve.attempt_starts == [1, 7]


def test_an_attempt_that_counts_anew_continues_the_axis(tmp_path):
    # skrl counts timesteps from 0 again after loading a checkpoint.
    write_events(tmp_path, [(s, 100.0 + s, 1.0) for s in (0, 16, 32)])
    write_events(tmp_path, [(s, 900.0 + s, 2.0) for s in (0, 16, 32, 48)])
    [scalars] = read_run(str(tmp_path))
    curve = scalars.curve("reward")
    assert curve.steps == [0, 16, 32, 48, 64, 80, 96]
    assert curve.attempt_starts == [0, 48]
    assert all(b > a for a, b in zip(curve.steps, curve.steps[1:]))


def test_writers_at_the_same_time_are_one_attempt(tmp_path):
    write_events(tmp_path / "r0", [(s, 100.0 + s, 1.0) for s in range(5)])
    write_events(tmp_path / "r1", [(s, 100.5 + s, 1.0) for s in range(5)], tag="loss")
    sessions = [read_session(str(p)) for p in sorted(tmp_path.rglob("events.out.tfevents.*"))]
    assert [len(g) for g in attempts(sessions)] == [2]


def test_sweep_tasks_are_separate_curves_and_metrics_are_chosen_by_name(tmp_path):
    for task in range(2):
        write_events(tmp_path / "tasks" / str(task) / "tb", [(s, 100.0 + s, task + s) for s in range(3)])
    found = read_run(str(tmp_path), array_size=2)
    assert [s.task for s in found] == [0, 1]
    assert [s.curve("reward").values for s in found] == [[0, 1, 2], [1, 2, 3]]
    tags = ["Loss/value", "Train/mean_reward", "Train/mean_episode_length"]
    assert choose(tags, [], main=("Train/mean_reward",)) == ["Train/mean_reward", "Loss/value",
                                                             "Train/mean_episode_length"]
    assert choose(tags, ["Train/*"]) == ["Train/mean_reward", "Train/mean_episode_length"]
    assert choose(tags, ["value"]) == ["Loss/value"]
    with pytest.raises(HpctrainError) as err:
        choose(tags, ["return"])
    assert "choose from: Loss/value, Train/mean_reward" in str(err.value)


def make_run(tmp_path: Path, array_size: int | None = None) -> Run:
    run_dir = tmp_path / "runs" / "job" / "20261122-010203-abcd"
    run_dir.mkdir(parents=True)
    RunRecord(run_id=run_dir.name, name="job", site="local", backend="local", library="rsl_rl",
              array_size=array_size).save(str(run_dir / "run.json"))
    return Run(run_dir)


def test_plot_draws_a_png_with_every_task_and_the_main_metric_first(tmp_path):
    from hpctrain.follow.plot import plot
    run = make_run(tmp_path, array_size=2)
    for task in range(2):
        d = run.path / "tasks" / str(task) / "logs"
        write_events(d / "1", [(s, 100.0 + s, s) for s in range(5)], tag="Loss/value")
        write_events(d / "1", [(s, 100.0 + s, s) for s in range(5)], tag="Train/mean_reward")
        write_events(d / "2", [(s, 900.0 + s, s) for s in range(3, 8)], tag="Train/mean_reward")
    drawn = plot(run)
    assert drawn.shown == ["Train/mean_reward", "Loss/value"]  # rsl-rl's main metric first
    assert [(c.tag, c.task, c.attempt_starts) for c in drawn.curves] == [
        ("Train/mean_reward", 0, [0, 3]), ("Train/mean_reward", 1, [0, 3]),
        ("Loss/value", 0, [0]), ("Loss/value", 1, [0])]
    png = Path(drawn.path).read_bytes()
    assert drawn.path == str(run.path / "plots" / "curves.png") and png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    assert width > 600 and height > 300


def test_plot_of_a_run_without_event_files_says_where_it_looked(tmp_path):
    from hpctrain.follow.plot import plot
    run = make_run(tmp_path)
    with pytest.raises(HpctrainError) as err:
        plot(run)
    assert "no TensorBoard event files yet" in str(err.value) and "$HPCTRAIN_RUN_DIR" in str(err.value)


def test_handle_shows_progress_and_plots(tmp_path):
    from hpctrain import Handle
    run = make_run(tmp_path)
    write_progress(str(run.path / "status"), Progress(rank=0, step=7, time=1.0, metrics={"reward": 3.0}))
    write_events(run.path / "tb", [(s, 100.0 + s, s) for s in range(3)])
    h = Handle(str(run.path))
    [p] = h.progress()
    assert (p.step, p.metric, p.value) == (7, "reward", 3.0)
    assert h.plot(out=str(tmp_path / "x.png")) == str(tmp_path / "x.png")


@pytest.mark.parametrize("out,written,magic", [
    ("plainname", "plainname", b"\x89PNG"), ("dir/", "dir/curves.png", b"\x89PNG"),
    ("x.PNG", "x.PNG", b"\x89PNG"), ("x.svg", "x.svg", b"<?xml"), ("x.pdf", "x.pdf", b"%PDF"),
    ("a.b/name", "a.b/name", b"\x89PNG")])
def test_plot_writes_exactly_where_it_says(tmp_path, out, written, magic):
    """`plot --out` without an image extension, or naming a directory, writes the path it
    prints (matplotlib on its own adds .png to a bare name: the file was elsewhere)."""
    from hpctrain.follow.plot import plot
    run = make_run(tmp_path)
    write_events(run.path / "tb", [(s, 100.0 + s, s) for s in range(3)])
    (tmp_path / "dir").mkdir()
    (tmp_path / "a.b").mkdir()
    drawn = plot(run, out=str(tmp_path / out))
    assert drawn.path == str(tmp_path / written)
    assert Path(drawn.path).read_bytes().startswith(magic)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted({"runs", "dir", "a.b", Path(written).parts[0]})


@pytest.mark.parametrize("out", ["x.jpeg2", "x.txt", "x.tfevents"])
def test_plot_refuses_a_format_it_cannot_write(tmp_path, out):
    from hpctrain.follow.plot import plot
    run = make_run(tmp_path)
    with pytest.raises(HpctrainError) as err:
        plot(run, out=str(tmp_path / out))
    assert "--out" in err.value.what and ".png" in err.value.fix


@pytest.mark.parametrize("claimed", [2 ** 62, 2 ** 48, 2 ** 40, 2 ** 63 - 1])
def test_an_event_file_claiming_a_huge_record_is_an_error_not_a_crash(tmp_path, claimed):
    """A record header (8-byte length, its masked CRC) that claims more than memory holds:
    TensorBoard's reader asks for all of it at once."""
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c
    from hpctrain.follow.plot import plot
    from tests.hostile import tried
    run = make_run(tmp_path)
    header = struct.pack("<Q", claimed)
    (run.path / "events.out.tfevents.1.host").write_bytes(
        header + struct.pack("<I", masked_crc32c(header)) + b"x" * 64)
    with pytest.raises(HpctrainError) as err:
        plot(run)
    assert "is damaged" in err.value.what and err.value.fix
    tried("event files")
