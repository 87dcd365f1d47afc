"""Hostile input on the real cluster: payloads through sbatch, srun, torchrun and the rank side to
the program on two nodes; and `submit` killed with -9 at every step of a Slurm submission."""
from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, submitted, wait_for_job
from tests.hostile import canary_payloads, tried
from tests.operate_helpers import job_file, status_json, wait_state

ECHO = ROOT / "tests" / "programs" / "echo_rank.py"
SUBMIT_UNTIL = ROOT / "tests" / "programs" / "submit_until.py"


def test_payloads_reach_the_program_byte_exact_on_two_nodes(cli, cluster, tmp_path):
    canary = tmp_path / "CANARY"
    payloads = canary_payloads(str(canary))
    weird = tmp_path / "we'ird $(touch CANARY) dir; `x`"
    weird.mkdir()
    program = weird / "echo $rank.py"
    shutil.copy(ECHO, program)
    env = {f"HOSTILE_{i}": p for i, p in enumerate(payloads)}
    (weird / "job.yaml").write_text(yaml.safe_dump({
        "name": "hostile-slurm", "script": program.name, "args": payloads, "env": env,
        "python": sys.executable, "setup": [f"echo {p!r} >/dev/null" for p in ("$(id)", "a;b")],
        "resources": {"nodes": 2, "procs_per_node": 1, "time": "00:05:00"}}))
    tried("execution", 2 * len(payloads) + 2)
    job_id, run_dir = submitted(cli("submit", "job.yaml", "--site", cluster, cwd=weird).stdout)
    info = wait_for_job(job_id, timeout=300)
    assert info["JobState"] == "COMPLETED", (run_dir / "logs").glob("*")
    seen = [json.loads(p.read_text()) for p in sorted(run_dir.glob("results/rank-*.json"))]
    assert len(seen) == 2 and {s["env"]["SLURMD_NODENAME"] for s in seen} == {"node1", "node2"} \
        or len({s["env"]["SLURMD_NODENAME"] for s in seen}) == 2
    for rank in seen:
        assert rank["argv"] == payloads
        assert {k: rank["env"].get(k) for k in env} == env
        # The job runs the copy of its code taken at submit (hpctrain/runs/snapshot.py), in the run.
        code = run_dir / "code"
        assert rank["cwd"] == str(code) and rank["script"] == str(code / program.name)
    assert not canary.exists() and not (weird / "CANARY").exists()


def _jobs_of(run_dir: Path) -> list[dict]:
    """Slurm's own records of the jobs whose output lies in this run directory."""
    text = subprocess.run(["squeue", "--json", "--all", "--states=all"], capture_output=True,
                          text=True, check=True).stdout
    return [j for j in json.loads(text)["jobs"]
            if str(j.get("standard_output", "")).startswith(f"{run_dir}/logs/")]


POINTS = ["before-record", "after-index", "after-files", "after-start", "after-job-id",
          "fail-record"]


@pytest.mark.parametrize("point", POINTS)
def test_slurm_submit_killed_at_any_step(point, cli, cluster, tmp_path):
    tried("crash")
    name = f"skilled-{point}"
    jf = job_file(tmp_path, name, nodes=1, procs=1, args=["--seconds", "120"])
    proc = subprocess.run([sys.executable, str(SUBMIT_UNTIL), point, str(jf), "--site", cluster],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    runs = list((Path(os.environ["HPCTRAIN_RUNS_DIR"]) / name).glob("*"))
    if point == "fail-record":
        assert proc.returncode == 2, proc.stderr
        job = proc.stderr.split("job ", 1)[1].split()[0]
        assert wait_for_job(job, timeout=60)["JobState"] == "CANCELLED"
        assert not runs
        return
    assert proc.returncode == -9, proc.stderr
    if point == "before-record":
        assert all(not _jobs_of(r) for r in runs)
        return
    [run_dir] = runs
    listed = [r for r in json.loads(cli("list", "--json").stdout) if r["name"] == name]
    assert len(listed) == 1
    if point in ("after-index", "after-files"):
        st = status_json(cli, run_dir.name)
        assert st["state"]["state"] == "LOST" and not _jobs_of(run_dir), st
        return
    # sbatch had queued the job: status finds it by its output path, cancel stops it.
    st = wait_state(cli, run_dir.name, {"PENDING", "RUNNING"})
    [job] = _jobs_of(run_dir)
    assert st["job"] == str(job["job_id"]), st
    cli("cancel", run_dir.name)
    assert wait_for_job(str(job["job_id"]), timeout=60)["JobState"] == "CANCELLED"
    assert status_json(cli, run_dir.name)["state"]["state"] == "CANCELLED"


# ------------------------------------------------------------------ every field, through sbatch
#
# The unit walk (tests/unit/test_hostile_inputs.py) renders every (field, payload) and runs the
# `local` scheduler's scripts; here every pair that loads against the cluster's site goes through
# the real sbatch and runs on the cluster. One job per payload per *lane*: a lane is a set of
# fields that can share a job (each carrying that lane's payload), so ~40 payloads make ~40 jobs
# per lane, not one per pair. A combination that hpctrain or sbatch refuses is split into its
# pairs, each submitted alone. Every (field, accepted payload) pair is in exactly one submission.

from hpctrain.errors import HpctrainError  # noqa: E402
from hpctrain.job.load import load_job  # noqa: E402
from hpctrain.submission import prepare, submit_prepared  # noqa: E402
from tests.unit.test_hostile_inputs import ENV_REF, JOB_FIELDS, SITE_FIELDS, _job, _site_text  # noqa: E402

LOCALCLUSTER = ROOT / "site_configs" / "localcluster.yaml"
IMAGE = "localhost/hpctrain-test:latest"
# Site fields that are not the Slurm script's: an ssh site's hosts and how they are reached
# (tests/ssh/), and a login node's (login:, remote:) submission over ssh (tests/slurm/test_remote.py).
NOT_SLURM = {f for f in SITE_FIELDS if f.split(".")[0] in ("hosts", "ssh", "sync", "login", "remote")}

# lane -> its fields ("job." or "site." + the unit test's field name). The main lane's fields go
# to the program (args, env, python words), to the batch shell (setup, modules, runs_dir) or to
# sbatch's directives (comment, mail-type, account, qos) at once; the others cannot share a job:
# a library's own fields; a 2-node rendezvous (head.*); a setup that stops the job (module_init);
# a container; a partition or constraint that sbatch refuses (this cluster has none of those).
LANES = {
    "main": ["job.name", "job.script", "job.args", "job.python", "job.env.value", "job.setup",
             "job.runs_dir", "job.snapshot.exclude", "job.sbatch.value", "job.sbatch.list",
             "job.resources.account", "job.resources.qos", "site.name", "site.description",
             "site.gpu_type", "site.modules", "site.sbatch_skip", "site.env.value",
             "site.sbatch_forbid", "site.sbatch_extra"],
    "isaaclab": ["job.task", "job.isaaclab", "site.defaults.args", "site.defaults.sbatch"],
    "config": ["job.config", "job.sweep.value"],
    "head.interface": ["site.head.interface"],
    "head.suffix": ["site.head.suffix"],
    "module_init": ["site.module_init"],
    "container": ["job.container.options"],
    "alone": ["job.resources.partition", "job.resources.constraint", "site.defaults.partition"],
    # the job's own `site:` (no site given beside it); the library/site fields no site accepts
    # here (container runtimes the cluster lacks, scheduler, limits...) are refused and counted
    "own-site": ["job.site"],
    # `python: STUB $VAR`: a word that is one $NAME names the node's value, by design (job/plan.py)
    "python.env": [],
}
for _f in [f"job.{f}" for f in JOB_FIELDS] + [f"site.{f}" for f in SITE_FIELDS if f not in NOT_SLURM]:
    if not any(_f in fields for fields in LANES.values()):
        LANES.setdefault("alone", []).append(_f)

# A stand-in module system: `module` records its words, one NUL-terminated per word.
MODULE_INIT = 'module() {{ printf "%s\\0" "$@" >>{record}; }}\n'


def _merge(into: dict, more: dict) -> dict:
    for key, value in more.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value
    return into


class Submission:
    """One job of a lane: the pairs it carries, built in its own directory."""

    def __init__(self, lane: str, pairs: list[tuple[str, str]], work: Path):
        self.lane, self.pairs, self.work = lane, pairs, work
        self.values = dict(pairs)
        self.job_id = self.run = self.prep = None
        self.refused: str | None = None

    def what(self) -> str:
        return f"lane {self.lane}: " + ", ".join(f"{f}={p!r}" for f, p in self.pairs)

    def build(self):
        """(job dict, site path or None)."""
        v = self.values
        self.work.mkdir(parents=True)
        (self.work / "train.py").write_text("pass\n")
        self.module_record = self.work / "module-words"
        (self.work / "module-init.sh").write_text(MODULE_INIT.format(record=self.module_record))
        extra: dict = {"resources": {"nodes": 2 if self.lane.startswith("head.") else 1,
                                     "procs_per_node": 1, "time": "00:03:00"}}
        if self.lane == "isaaclab":  # both library fields in one rsl_rl job
            extra.update(library="rsl_rl", script=None, task=v.get("job.task", "T"),
                         isaaclab=v.get("job.isaaclab", "/opt/IsaacLab"))
        elif self.lane == "config" and "job.config" in v and "job.sweep.value" in v:
            extra.update(library="di_engine", script=None, config=v["job.config"],
                         sweep={"grid": {"env.HOSTILE": [v["job.sweep.value"]]}})
        else:
            for field, payload in self.pairs:
                if field.startswith("job."):
                    _merge(extra, JOB_FIELDS[field[4:]](payload))
        if self.lane == "container":
            extra["container"]["image"] = IMAGE
        job = _job(extra, "train.py")
        if self.lane == "own-site":  # (`site: ""` is the default site: here, the cluster's)
            os.environ["HPCTRAIN_SITE"] = "localcluster"
            return job, None
        site = yaml.safe_load(LOCALCLUSTER.read_text())
        for field, payload in self.pairs:
            if field.startswith("site."):
                more = yaml.safe_load(_site_text(field[5:], payload, self.work))
                if field != "site.name":
                    more.pop("name")
                _merge(site, more)
        if "site.modules" in v:  # a module system that records what it was asked to load
            site["module_init"] = str(self.work / "module-init.sh")
        path = self.work / "site.yaml"
        path.write_text(yaml.safe_dump(site, allow_unicode=True))
        return job, str(path)

    def submit(self, record: Path) -> None:
        cwd = os.getcwd()
        os.environ["HOSTILE_RECORD"] = str(record)  # sbatch hands it to the job (--export=ALL)
        try:
            job, site = self.build()
            os.chdir(self.work)
            self.record = record
            for _ in range(5):
                self.prep = prepare(load_job(job, site=site))
                try:
                    self.run = submit_prepared(self.prep)
                except HpctrainError as exc:
                    self.refused = str(exc)
                    # Hundreds of runs a second: two may draw the same run id, and the second
                    # is refused ("submit again") without losing the first; so submit again.
                    if "already exists" in self.refused:
                        continue
                    return
                self.refused = None
                break
            else:
                return
            self.job_id = self.run.record.job_id
        finally:
            os.chdir(cwd)
            os.environ.pop("HOSTILE_RECORD", None)
            os.environ.pop("HPCTRAIN_SITE", None)


def _lane(field: str, payload: str) -> str:
    if field == "job.python" and ENV_REF.fullmatch(payload):
        return "python.env"
    return next(lane for lane, fields in LANES.items() if field in fields)


def _loads(sub: Submission) -> bool:
    cwd = os.getcwd()
    try:
        job, site = sub.build()
        os.chdir(sub.work)
        prepare(load_job(job, site=site))
        return True
    except HpctrainError as exc:
        assert exc.what and "Traceback" not in str(exc), sub.what()
        return False
    finally:
        os.chdir(cwd)
        os.environ.pop("HPCTRAIN_SITE", None)
        shutil.rmtree(sub.work, ignore_errors=True)


def test_every_field_with_every_payload_runs_through_sbatch(cluster, home, tmp_path, monkeypatch):
    canary = tmp_path / "CANARY"
    payloads = canary_payloads(str(canary))
    monkeypatch.setenv("HOME", str(tmp_path / "home-dir"))  # runs_dir: ~ and $HOME land here
    (tmp_path / "home-dir").mkdir()
    made = itertools.count()

    def sub(lane, pairs):
        return Submission(lane, pairs, tmp_path / "w" / f"{lane}-{next(made)}")

    # Which pairs load at all (alone): the others are the unit test's refusals.
    accepted = {(f, p) for lane, fields in LANES.items() for f in fields for p in payloads
                if _loads(sub(lane, [(f, p)]))}
    lane_of = {f: lane for lane, fields in LANES.items() for f in fields}
    jobs: list[Submission] = []
    jobs += [sub("python.env", [("job.python", p)]) for p in payloads
             if ("job.python", p) in accepted and _lane("job.python", p) == "python.env"]
    for lane, fields in LANES.items():
        for p in payloads:
            pairs = [(f, p) for f in fields if (f, p) in accepted and _lane(f, p) == lane]
            if not pairs:
                continue
            if lane == "alone" or not _loads(sub(lane, pairs)):
                jobs += [sub(lane, [pair]) for pair in pairs]  # (refused together: each alone)
            else:
                jobs.append(sub(lane, pairs))
    carried = [pair for s in jobs for pair in s.pairs]
    assert sorted(carried) == sorted(accepted) and len(set(carried)) == len(carried)
    assert {f for f, _ in accepted} >= {f for f in lane_of if lane_of[f] != "alone"}

    (tmp_path / "records").mkdir()
    done: list[Submission] = []
    for s in list(jobs):
        s.submit(tmp_path / "records" / s.work.name)
        if s.refused is not None and len(s.pairs) > 1:  # sbatch refused the combination
            jobs += [sub(s.lane, [pair]) for pair in s.pairs]
            for t in jobs[-len(s.pairs):]:
                t.submit(tmp_path / "records" / t.work.name)
                done.append(t)
        else:
            done.append(s)
    tried("execution", len(accepted))

    failures = []
    for s in done:
        try:
            _check(s, canary)
        except AssertionError as exc:
            failures.append(f"{s.what()}: {exc}")
    ran = sum(1 for s in done if s.job_id)
    refused = sum(1 for s in done if s.refused)
    lanes = {lane: sum(1 for s in done if s.lane == lane and s.job_id) for lane in LANES}
    print(f"{len(accepted)} (field, payload) pairs: {ran} jobs ran ({lanes}), {refused} "
          "submissions refused by sbatch")
    # (a runs_dir of ~root puts its run in root's home: remove what this test made there)
    for s in done:
        if s.run is not None and not str(s.run.path).startswith(str(tmp_path)):
            shutil.rmtree(s.run.path, ignore_errors=True)
    # (the first "ran a command" names the job whose end first found the canary)
    assert not failures, f"{len(failures)} of {len(done)} submissions:\n" + "\n".join(failures[:30])
    assert not canary.exists(), "a payload ran a command"
    assert ran and refused


def _log(s: Submission) -> str:
    return "".join(p.read_text(errors="replace") for p in sorted(s.run.path.rglob("slurm-*.out")))


def _check(s: Submission, canary: Path) -> None:
    if s.refused is not None:  # sbatch said no: hpctrain says so (exit 2) and leaves no job
        assert s.lane == "alone" or len(s.pairs) == 1
        assert "sbatch refused the job" in s.refused, s.refused
        assert not s.prep.run_dir.exists() and s.job_id is None
        return
    info = wait_for_job(s.job_id, timeout=240)
    assert not canary.exists(), "ran a command"
    state, log = info["JobState"], _log(s)
    v = s.values
    if s.lane == "module_init":  # sourcing a file that is not there stops the setup
        assert state == "FAILED" and "the site's module_init" in log and "(status " in log, log[-1500:]
        return
    if s.lane == "head.interface":  # no interface of that name on node1
        assert state == "FAILED" and "has no IPv4 address on interface" in log, log[-1500:]
        return
    if s.lane == "head.suffix" and state == "FAILED":  # node1<suffix> is no host name
        assert "does not resolve" in log, log[-1500:]
        return
    if s.lane == "python.env" and state == "FAILED":  # a $NAME the node does not set
        assert "unbound variable" in log and not os.path.expandvars(v["job.python"]).startswith("/"), \
            log[-1500:]
        return
    if s.lane == "container" and state == "FAILED":
        # An option podman refuses (or one that names the image's place): the supervisor says
        # so. A word's $NAME expands on the node by design (hpctrain/job/containers.py).
        assert "hpctrain: launch: " in log or "unbound variable" in log, log[-1500:]
        return
    assert state == "COMPLETED", f"{state}:\n{log[-2500:]}"
    if s.lane == "container":
        return  # the stand-in runs in the image, without the recording's directory
    preps = list(s.prep.tasks) or [s.prep]
    for prep in preps:
        run_dir = Path(prep.run_dir)
        plan = prep.plan
        launches = []
        for path in sorted(s.record.parent.glob(f"{s.record.name}-*.json")):
            seen = json.loads(path.read_text())
            if seen["argv"][-3:] == [str(run_dir / "rank"), "run", str(run_dir / "bootstrap.json")]:
                launches.append(seen)
        assert len(launches) == plan.nnodes, f"{len(launches)} launches recorded:\n{log[-1500:]}"
        for seen in launches:
            words = plan.python[1:]
            if s.lane == "python.env":  # (HOME: this test's, handed to the job by sbatch)
                words = [os.path.expandvars(w) for w in words]
            assert seen["argv"][:len(plan.python) - 1] == words
            assert seen["cwd"] == plan.workdir
            for key, value in plan.env.items():
                assert seen["env"].get(key) == value, key
        # What the rank side hands the program: the args, the task, the config, byte-exact.
        assert json.loads((run_dir / "bootstrap.json").read_text()) == \
            json.loads(json.dumps(plan.bootstrap))
    plan = s.prep.plan
    if "job.args" in v:
        assert plan.bootstrap["program"][-2:] == [v["job.args"]] * 2
    if "job.python" in v:
        assert plan.python[1:] == [v["job.python"]]
    for field, key in (("job.env.value", "HOSTILE"), ("site.env.value", "HOSTILE_SITE"),
                       ("job.sweep.value", "HOSTILE")):
        if field in v:
            assert plan.env[key] == v[field], field
    if "site.modules" in v:
        assert s.module_record.read_bytes() == f"load\0{v['site.modules']}\0".encode()
    if "site.defaults.args" in v:
        assert v["site.defaults.args"] in plan.bootstrap["program"]
    comment = v.get("job.sbatch.value", v.get("site.defaults.sbatch"))
    account = v.get("job.resources.account")
    if comment is not None or account is not None:  # the directives reached Slurm byte-exact
        out = subprocess.run(["squeue", "-h", "--states=all", "-j", s.job_id, "-o", "%k\x1f%a"],
                             capture_output=True, text=True, check=True).stdout
        got_comment, got_account = out[:-1].split("\x1f") if out.endswith("\n") else out.split("\x1f")
        if comment is not None:
            assert got_comment == comment, f"Slurm's comment: {got_comment!r}"
        if account is not None:
            # With accounting (slurmdbd), as on a real site, an account Slurm does not know is
            # replaced by the user's default (root's): sbatch took the directive and started
            # the job; that its words arrive byte-exact is what the comment shows (the same
            # #SBATCH quoting) and the unit tier's render checks.
            assert got_account == "root", f"Slurm's account: {got_account!r}"
