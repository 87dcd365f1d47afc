"""A study of a Python function (issue 41 item 5, the submitit path): submit_function with a
job that has `search:` prepares a study whose trials run search/call.py, which calls the
pickled function with the trial's KEY=VALUE args — no process started here."""
import os
import textwrap

import cloudpickle
import msgspec
import pytest

from hpctrain.job.load import load_job
from hpctrain.search import call
from hpctrain.search.trials import StudyJob, trial_job
from hpctrain.submission import _write_job_dir, prepare_function_study

JOB = """\
name: fs
args: ["lr=0.001", "width=4", "+tag=base"]
resources: {time: "00:10:00"}
search:
  params:
    lr: {low: 1.0e-4, high: 1.0e-2, log: true}
    width: {low: 1, high: 8}
  n_trials: 4
  parallel: 2
"""


def objective(scale, lr, width, tag, offset=0.0):
    return scale * lr + width + offset, tag


def load(tmp_path, site="local"):
    path = tmp_path / "job.yaml"
    path.write_text(textwrap.dedent(JOB))
    return load_job(str(path), site=site)


@pytest.mark.parametrize("site", ["local", "localcluster"])
def test_a_function_study_is_a_study_whose_trials_call_the_function(home, tmp_path, site):
    prep = prepare_function_study(objective, load(tmp_path, site), (2.0,), {"offset": 1.0})
    assert prep.record["kind"] == "study" and prep.record["function"]["qualname"] == "objective"
    assert prep.function is None and "hpctrain.search.worker" in prep.script  # workers, as any study
    assert prep.plan.program[-4:] == [os.path.realpath(call.__file__), "lr=0.0001", "width=1",
                                      "+tag=base"]  # the first trial's plan: the runner, its args
    d = tmp_path / "run"
    d.mkdir()
    _write_job_dir(prep, d)
    fn, args, kwargs = cloudpickle.loads((d / call.FUNCTION).read_bytes())
    assert (fn(*args, **kwargs, lr=1, width=2, tag="x"), args, kwargs) == ((5.0, "x"), (2.0,), {"offset": 1.0})
    # A trial's job runs the runner with the trial's value in its KEY=VALUE argument.
    study = msgspec.json.decode((d / "study/job.json").read_bytes(), type=StudyJob)
    spec = trial_job(study, {"lr": 0.005, "width": 7}, False).spec
    assert spec.script == os.path.realpath(call.__file__) and spec.args[:2] == ["lr=0.005", "width=7"]


def test_the_runner_calls_the_function_with_the_trials_values(tmp_path, monkeypatch):
    (tmp_path / "study").mkdir()
    (tmp_path / call.FUNCTION).write_bytes(cloudpickle.dumps((objective, (2.0,), {"offset": 1.0})))
    trial = tmp_path / "trials" / "0003"
    trial.mkdir(parents=True)
    monkeypatch.setenv("HPCTRAIN_RUN_DIR", str(trial))
    assert call.main(["lr=0.5", "--width=3", "+tag=a b"]) == (5.0, "a b")


def test_the_runner_refuses_what_is_not_key_value_and_a_linked_file(tmp_path):
    assert call.keyword_values(["n=3", "x=1e-3", "ok=true", "s=abc", "l=[1, 2]"]) == \
        {"n": 3, "x": 1e-3, "ok": True, "s": "abc", "l": [1, 2]}
    for bad in (["--steps", "5"], ["1x=2"]):
        with pytest.raises(SystemExit, match="KEY=VALUE"):
            call.keyword_values(bad)
    (tmp_path / "study").mkdir()
    (tmp_path / "elsewhere.pkl").write_bytes(cloudpickle.dumps((objective, (), {})))
    (tmp_path / call.FUNCTION).symlink_to(tmp_path / "elsewhere.pkl")
    with pytest.raises(OSError):
        call.load(tmp_path)
