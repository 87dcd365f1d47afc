"""Population-based training (search.method pbt, issue 42): every mistake one error at its line,
a parameter or library that cannot change mid-run refused with the reason, the exploit and
explore rules, the lineage's untrusted reading and the best member's schedule — no process."""
import json
import random
import textwrap

import msgspec
import pytest

from hpctrain.errors import HpctrainError
from hpctrain.job.load import load_job
from hpctrain.schema.spec import Search
from hpctrain.search.pbt import explore, lineage
from hpctrain.search.pbt.lineage import Record
from hpctrain.search.pbt.show import schedule

JOB = """\
name: pop
{head}
args: ["--lr=0.01", "agent.entropy_coef=0.01"]
resources: {{nodes: 1, time: "00:10:00"}}
search:
  method: pbt
{search}
"""
GOOD = """\
params: {lr: {low: 1.0e-5, high: 1.0e-1, log: true}}
parallel: 4
pbt: {interval: 10, steps: 100}"""


def load(tmp_path, search: str = GOOD, head: str = "script: train.py"):
    path = tmp_path / "job.yaml"
    path.write_text(JOB.format(head=head, search=textwrap.indent(search, "  ")))
    return load_job(str(path), site="localcluster")


def test_a_population_validates_and_says_its_shape(tmp_path):
    from hpctrain.job.search import shape
    job = load(tmp_path)
    text = shape(job.spec)
    assert "4 member(s) of lr" in text and "every 10 step(s) the bottom 1 copy one of the top 1" in text


@pytest.mark.parametrize("search, line, what", [
    ("params: {lr: {low: 1.0e-5, high: 1.0e-1}}\nparallel: 4", 6, "needs search.pbt"),
    ("params: {lr: {low: 1.0e-5, high: 1.0e-1}}\nparallel: 1\npbt: {interval: 10, steps: 100}",
     8, "at least 2 members"),
    ("params: {lr: {low: 1.0e-5, high: 1.0e-1}}\nparallel: 4\npbt: {interval: 100, steps: 100}",
     9, "no member would ever copy"),
    ("params: {lr: {low: 1.0e-5, high: 1.0e-1}}\nparallel: 4\n"
     "pbt: {interval: 10, steps: 100, explore: {clip: perturb}}", 9, "not a parameter"),
    ("params: {lr: {choices: [0.1, 0.01]}}\nparallel: 4\n"
     "pbt: {interval: 10, steps: 100, explore: {lr: perturb}}", 9, "is categorical"),
    ("params: {agent.policy.actor_hidden_dims: {choices: ['[64]', '[128]']}}\nparallel: 4\n"
     "pbt: {interval: 10, steps: 100}", 7, "tensors are shaped by it"),
    ("params: {lr: {low: 1.0e-5, high: 1.0e-1}}\nparallel: 4\n"
     "pbt: {interval: 10, steps: 100, fraction: 0.7}", 9, "0.5"),
])
def test_every_mistake_is_one_error_at_its_line(tmp_path, search, line, what):
    with pytest.raises(HpctrainError) as err:
        load(tmp_path, search)
    assert what in str(err.value), str(err.value)
    assert f"job.yaml:{line}" in str(err.value), str(err.value)


def test_pbt_without_the_method_is_refused(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("name: s\nscript: t.py\nargs: ['--lr=1']\nsearch:\n  params: {lr: {low: 1, "
                    "high: 2}}\n  pbt: {interval: 1, steps: 9}\n")
    with pytest.raises(HpctrainError, match="search.method is not pbt"):
        load_job(str(path), site="localcluster")


def test_a_value_the_library_restores_from_its_checkpoint_is_refused_with_why(tmp_path):
    search = ("params: {agent.algorithm.learning_rate: {low: 1.0e-5, high: 1.0e-2}}\n"
              "parallel: 4\npbt: {interval: 10, steps: 100}")
    head = "library: rsl_rl\nscript: train.py"
    path = tmp_path / "job.yaml"
    path.write_text(JOB.format(head=head, search=textwrap.indent(search, "  ")).replace(
        '"--lr=0.01"', '"agent.algorithm.learning_rate=0.001"'))
    with pytest.raises(HpctrainError) as err:
        load_job(str(path), site="localcluster")
    assert "restores the optimizer's state" in str(err.value) and "job.yaml:8" in str(err.value)


def _search(**pbt):
    return msgspec.convert({"method": "pbt", "parallel": 4,
                            "params": {"lr": {"low": 1e-5, "high": 1e-1, "log": True},
                                       "n": {"low": 1, "high": 8}, "opt": {"choices": ["a", "b"]}},
                            "pbt": {"interval": 5, "steps": 50, **pbt}}, Search)


def test_explore_perturbs_numbers_within_the_space_and_resamples_choices():
    s = _search(resample_probability=0)  # perturbed always (the chance of a draw: below)
    rng = random.Random(1)
    for _ in range(50):
        new = explore.explore(s, {"lr": 1e-3, "n": 8, "opt": "a"}, rng)
        assert any(abs(new["lr"] - 1e-3 * f) < 1e-12 for f in (0.8, 1.2))
        assert new["n"] in (6, 8) and new["opt"] in ("a", "b")  # 8 x 1.2 is kept at 8
    s = _search(explore={"lr": "resample"})
    values = {explore.explore(s, {"lr": 1e-3, "n": 4, "opt": "a"}, rng)["lr"] for _ in range(20)}
    assert len(values) == 20 and all(1e-5 <= v <= 1e-1 for v in values)


@pytest.mark.parametrize("latest, me, parent", [
    ({0: 1.0, 1: 5.0, 2: 3.0, 3: 4.0}, 0, 1),  # the bottom one copies the top one
    ({0: 1.0, 1: 5.0, 2: 3.0, 3: 4.0}, 2, None),  # the middle goes on
    ({0: 1.0, 1: 5.0, 2: 3.0, 3: 4.0}, 1, None),  # the top goes on
    ({0: 1.0}, 0, None),  # alone so far: nobody to compare with (nobody waits)
    ({0: 2.0, 1: 2.0}, 0, None),  # no better member
])
def test_the_bottom_fraction_copies_the_top(latest, me, parent):
    assert explore.parent_for(me, latest, 4, 0.25, "maximize", random.Random(0)) == parent
    flipped = {m: -v for m, v in latest.items()}
    assert explore.parent_for(me, flipped, 4, 0.25, "minimize", random.Random(0)) == parent


def test_the_lineage_is_read_as_untrusted(tmp_path):
    lineage.append(tmp_path, Record(member=0, event="start", time=1.0, params={"lr": 0.1}))
    path = lineage.lineage_path(tmp_path, 0)
    with open(path, "ab") as f:
        f.write(b'{"member":0,"event":"ready","time":2,"params":{},"checkpoint":"../../etc/x"}\n')
        f.write(b'{"member":1,"event":"ready","time":2,"params":{}}\n')  # another's member
        f.write(b'{"member":0,"event":"ready","time":3,"params":{},"score":NaN}\n')
        f.write(b'{"member":0,"event":"ready","ti')  # torn
    assert [r.event for r in lineage.read(tmp_path, 0)] == ["start"]
    with pytest.raises(ValueError):
        lineage.saved_path(tmp_path, 0, 1, "/etc/passwd")
    other = tmp_path / "other.jsonl"
    other.write_text("")
    lineage.lineage_path(tmp_path, 1).symlink_to(other)
    with pytest.raises(OSError):  # no write through a link
        lineage.append(tmp_path, Record(member=1, event="start", time=1.0, params={}))


def test_a_checkpoint_is_copied_whole_or_not_at_all(tmp_path):
    src = tmp_path / "ckpt.pt"
    src.write_bytes(b"x" * 1000)
    dst = tmp_path / "ws" / "0" / "ckpt.pt"
    assert lineage.copy_file(src, dst) == 1000 and dst.read_bytes() == src.read_bytes()
    assert not [p for p in dst.parent.iterdir() if p.name.startswith(".")]
    (tmp_path / "link.pt").symlink_to(src)
    with pytest.raises(OSError):
        lineage.copy_file(tmp_path / "link.pt", tmp_path / "ws" / "1" / "ckpt.pt")


def test_the_best_members_schedule_goes_back_through_its_copies():
    R = Record
    recs = {
        0: [R(member=0, event="start", time=0, params={"lr": 0.1}),
            R(member=0, event="ready", time=1, params={"lr": 0.1}, interval=1, step=10, score=5,
              checkpoint="c/a"),
            R(member=0, event="ready", time=3, params={"lr": 0.1}, interval=2, step=20, score=6,
              checkpoint="c/b")],
        1: [R(member=1, event="start", time=0, params={"lr": 1e-4}),
            R(member=1, event="ready", time=1.5, params={"lr": 1e-4}, interval=1, step=10,
              score=1, checkpoint="c/a"),
            R(member=1, event="exploit", time=2, params={"lr": 0.01}, interval=1, step=10,
              score=5, parent=0, parent_interval=1, checkpoint="c/a"),
            R(member=1, event="end", time=4, params={"lr": 0.01}, interval=2, step=20, score=9,
              checkpoint="c/b")],
    }
    got = [(p.member, p.step, p.params["lr"]) for p in schedule(recs, 1)]
    assert got == [(0, None, 0.1), (0, 10, 0.1), (1, 10, 0.01), (1, 20, 0.01)], got
    assert json.loads(msgspec.json.encode(schedule(recs, 0)))[-1]["step"] == 20


def test_explore_resamples_a_perturbed_key_with_its_probability():
    # Ray Tune's default: a quarter of the perturbed values are drawn afresh from the space,
    # each key on its own, and explored says which.
    assert _search().pbt.resample_probability == 0.25
    s = _search()
    rng = random.Random(3)
    fresh_lr = fresh_n = 0
    for _ in range(400):
        new, fresh = explore.explored(s, {"lr": 1e-3, "n": 4, "opt": "a"}, rng)
        perturbed = any(abs(new["lr"] - 1e-3 * f) < 1e-12 for f in (0.8, 1.2))
        assert perturbed == ("lr" not in fresh) and 1e-5 <= new["lr"] <= 1e-1
        assert "opt" in fresh  # a choice is always drawn
        fresh_lr += "lr" in fresh
        fresh_n += "n" in fresh
    assert 70 <= fresh_lr <= 130 and 70 <= fresh_n <= 130, (fresh_lr, fresh_n)
    always = _search(resample_probability=1)
    assert explore.explored(always, {"lr": 1e-3, "n": 4, "opt": "a"}, rng)[1] == ["lr", "n", "opt"]
    never = _search(resample_probability=0, explore={"lr": "resample"})
    assert explore.explored(never, {"lr": 1e-3, "n": 4, "opt": "a"}, rng)[1] == ["lr", "opt"]


@pytest.mark.parametrize("value", ["-0.1", "1.5", ".nan", "true"])
def test_a_resample_probability_outside_0_to_1_is_refused_at_its_line(tmp_path, value):
    with pytest.raises(HpctrainError) as err:
        load(tmp_path, GOOD.replace("steps: 100}", f"steps: 100, resample_probability: {value}}}"))
    assert "resample_probability" in str(err.value) and "job.yaml:9" in str(err.value), str(err.value)
