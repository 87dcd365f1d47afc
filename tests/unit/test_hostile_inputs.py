"""Hostile input, the fast layers: every string field of a job and of a site profile, filled with
payloads that would run a command, add a line or a directive, split, expand or inject an option
if any layer let them through unquoted; YAML traps; and Hypothesis-generated text.

For each (field, payload) and each backend the job is either refused with an HpctrainError (exit
2 on the CLI) or rendered, and then: the script parses (bash -n, all of a walk's scripts in one
bash process) and its header holds exactly the directive table's lines (no value added a
directive). Nothing is run here: tests/local/test_hostile_scripts.py walks the same fields and
payloads, passes the scripts' distinct shapes through shellcheck, and RUNS a representative set
on this machine (every field and every payload at least once) — with a stand-in interpreter that
records what it was given — checking that the launch receives every value byte-exact (argv,
environment, working directory) while the canary file that a command would create never
appears; an ssh script runs its `probe` there (what submit runs on every host). Slurm scripts
share those parts (templates/parts/) and are run for real on the cluster with the same payloads
in tests/slurm/test_hostile_slurm.py; torchrun and the rank side get them for real in
tests/local/test_hostile_local.py.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpctrain.backends import backend_class
from hpctrain.errors import HpctrainError
from hpctrain.job.load import load_job
from hpctrain.rendering.quoting import comment as _comment, q as _q
from hpctrain.submission import _write_job_dir, prepare
from hpctrain.schema.yamlfile import load_text
from tests.hostile import CONTROL, canary_payloads, tried
from tests.shellcheck import SHELLCHECK

STUB = Path(__file__).resolve().parents[1] / "programs" / "record_launch.sh"
ENV_REF = re.compile(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?")

# Where a payload goes in a job (dict) — each a function of the payload.
JOB_FIELDS = {
    "name": lambda v: {"name": v},
    "library": lambda v: {"library": v},
    "script": lambda v: {"script": v},
    "args": lambda v: {"args": ["--x", v, v]},
    "python": lambda v: {"python": f"{shlex.quote(str(STUB))} {shlex.quote(v)}"},
    "task": lambda v: {"library": "rsl_rl", "script": None, "task": v, "isaaclab": "/opt/IsaacLab"},
    "isaaclab": lambda v: {"library": "skrl", "script": None, "task": "T", "isaaclab": v},
    "config": lambda v: {"library": "di_engine", "script": None, "config": v},
    "resources.mem": lambda v: {"resources": {"mem": v}},
    "resources.time": lambda v: {"resources": {"time": v}},
    "resources.partition": lambda v: {"resources": {"partition": v}},
    "resources.account": lambda v: {"resources": {"account": v}},
    "resources.qos": lambda v: {"resources": {"qos": v}},
    "resources.constraint": lambda v: {"resources": {"constraint": v}},
    "env.value": lambda v: {"env": {"HOSTILE": v}},
    "env.key": lambda v: {"env": {v: "1"}},
    "secrets": lambda v: {"secrets": [v]},
    "setup": lambda v: {"setup": [f"echo {shlex.quote(v)} >/dev/null"]},
    "runs_dir": lambda v: {"runs_dir": v},
    "cpu_mode": lambda v: {"cpu_mode": v},
    "preemption.signal": lambda v: {"preemption": {"signal": v}},
    "sweep.value": lambda v: {"sweep": {"grid": {"env.HOSTILE": [v, "x"]}}},
    "sweep.key": lambda v: {"sweep": {"grid": {v: ["1", "2"]}}},
    "snapshot.exclude": lambda v: {"snapshot": {"exclude": [v]}},
    "site": lambda v: {"site": v},
    "resources.mem_per_cpu": lambda v: {"resources": {"mem_per_cpu": v}},
    "sbatch.value": lambda v: {"sbatch": {"comment": v}},
    "sbatch.list": lambda v: {"sbatch": {"mail-type": ["END", v]}},
    "sbatch.key": lambda v: {"sbatch": {v: "1"}},
    "after": lambda v: {"after": v},
    # Containers: Apptainer's exec words, pyxis' step options, the Podman supervisor's words.
    "container.image": lambda v: {"container": {"runtime": "apptainer", "image": v}},
    "container.mounts": lambda v: {"container": {"runtime": "apptainer", "image": "/i", "mounts": [v]}},
    "container.workdir": lambda v: {"container": {"runtime": "pyxis", "image": "i", "workdir": v}},
    "container.options": lambda v: {"container": {"runtime": "podman", "image": "i", "options": [v]}},
    "container.pyxis_image": lambda v: {"container": {"runtime": "pyxis", "image": v}},
    "container.env.value": lambda v: {"container": {"runtime": "apptainer", "image": "i",
                                                    "env": {"HOSTILE_C": v}}},
    "container.env.key": lambda v: {"container": {"runtime": "apptainer", "image": "i", "env": {v: "1"}}},
}

# Where a payload goes in a site profile (YAML text; the payload is a JSON string, valid YAML).
SITE_FIELDS = {
    "name": "name: {v}\n",
    "description": "name: hs\ndescription: {v}\n",
    "scheduler": "name: hs\nscheduler: {v}\n",
    "gpu_type": "name: hs\ngpu_type: {v}\n",
    "modules": "name: hs\nmodules: [{v}]\n",
    "sbatch_extra": "name: hs\nsbatch_extra: [{v}]\n",
    "sbatch_skip": "name: hs\nsbatch_skip: [{v}]\n",
    "env.value": "name: hs\nenv: {{HOSTILE_SITE: {v}}}\n",
    "env.key": "name: hs\nenv: {{{v}: '1'}}\n",
    "head.interface": "name: hs\nhead: {{mode: interface, interface: {v}}}\n",
    "head.suffix": "name: hs\nhead: {{mode: suffix, suffix: {v}}}\n",
    "defaults.args": "name: hs\ndefaults: {{args: [{v}]}}\n",
    "defaults.partition": "name: hs\ndefaults: {{resources: {{partition: {v}}}}}\n",
    "module_init": "name: hs\nmodule_init: {v}\nmodules: [m]\n",
    "sbatch_forbid": "name: hs\nsbatch_forbid: [{v}]\n",
    "limits.mem_per_node": "name: hs\nlimits: {{mem_per_node: {v}}}\n",
    "defaults.sbatch": "name: hs\ndefaults: {{sbatch: {{comment: {v}}}}}\n",
    "containers.cache_dir": "name: hs\ncontainers: {{cache_dir: {v}}}\ndefaults: {{container: "
                            "{{runtime: apptainer, image: /i.sif, isaac_sim_caches: true}}}}\n",
    "containers.stage_dir": "name: hs\ncontainers: {{stage_dir: {v}}}\ndefaults: {{container: "
                            "{{runtime: apptainer, image: /i.sif}}}}\n",
    "containers.commands": "name: hs\ncontainers: {{commands: {{apptainer: {v}}}}}\ndefaults: "
                           "{{container: {{runtime: apptainer, image: /i.sif}}}}\n",
    "containers.host_python": "name: hs\ncontainers: {{host_python: {v}}}\ndefaults: {{container: "
                              "{{runtime: apptainer, image: /i.sif}}}}\n",
    "containers.options": "name: hs\ncontainers: {{options: {{apptainer: [{v}]}}}}\ndefaults: "
                          "{{container: {{runtime: apptainer, image: /i.sif}}}}\n",
    "login": "name: hs\nlogin: {v}\nremote: {{runs_dir: /scratch/r}}\n",
    "remote.runs_dir": "name: hs\nlogin: me@login1\nremote: {{runs_dir: {v}}}\n",
    "remote.exclude": "name: hs\nlogin: me@login1\nremote: {{runs_dir: /r, exclude: [{v}]}}\n",
    # scheduler: ssh — the hosts, how they are reached, how the run directory gets there.
    "hosts": "name: hs\nscheduler: ssh\nhosts: {v}\n",
    "hosts.list": "name: hs\nscheduler: ssh\nhosts: [{v}, ws9]\n",
    "hosts.file": lambda v, tmp: _hostfile(tmp, v),
    "ssh.user": "name: hs\nscheduler: ssh\nssh: {{user: {v}}}\n",
    "ssh.port": "name: hs\nscheduler: ssh\nssh: {{port: {v}}}\n",
    "ssh.identity": "name: hs\nscheduler: ssh\nssh: {{identity: {v}}}\n",
    "ssh.known_hosts": "name: hs\nscheduler: ssh\nssh: {{known_hosts: {v}}}\n",
    "ssh.host_key": "name: hs\nscheduler: ssh\nssh: {{host_key: {v}}}\n",
    "ssh.connect_timeout": "name: hs\nscheduler: ssh\nssh: {{connect_timeout: {v}}}\n",
    "ssh.options": "name: hs\nscheduler: ssh\nssh: {{options: [{v}]}}\n",
    # (an option's value: anything printable passes the Key=value pattern)
    "ssh.options.value": lambda v, tmp: ("name: hs\nscheduler: ssh\nssh: {options: ["
                                         + json.dumps("Ciphers=" + v) + "]}\n"),
    "sync": "name: hs\nscheduler: ssh\nsync: {v}\n",
    "sync.mode": "name: hs\nscheduler: ssh\nsync: {{mode: {v}}}\n",
    "sync.exclude": "name: hs\nscheduler: ssh\nsync: {{mode: rsync, code: true, exclude: [{v}]}}\n",
}
SSH_ONLY = {field for field in SITE_FIELDS if field.split(".")[0] in ("hosts", "ssh", "sync")}
SCHEDULERS = ("local", "slurm", "ssh")
# What an ssh site needs beside the field under test (a key the field gives is left out).
SSH_BASE = {"hosts": "hosts: [ws1, ws2]\n",
            "ssh": "ssh: {user: me, identity: ~/.ssh/id_ed25519, host_key: accept-new}\n",
            "sync": "sync: shared\n"}


def _hostfile(tmp: Path, payload: str) -> str:
    """A site whose hosts are a hostfile's lines: the payload is the first."""
    (tmp / "hostile-hosts").write_text(f"{payload}\nws9\n")
    return "name: hs\nscheduler: ssh\nhosts: ./hostile-hosts\n"


def _site_text(field: str, payload: str, tmp: Path) -> str:
    spec = SITE_FIELDS[field]
    return spec(payload, tmp) if callable(spec) else spec.format(v=json.dumps(payload))


def _job(extra: dict, base_script: str) -> dict:
    job = {"name": "hostile", "script": base_script, "python": str(STUB),
           "resources": {"nodes": 1, "procs_per_node": 2, "time": "00:10:00"}}
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(job.get(key), dict):
            job[key] = dict(job[key], **value)
        else:
            job[key] = value
    return job


def _site_file(tmp: Path, text: str, scheduler: str) -> str:
    if "scheduler:" not in text:
        text += f"scheduler: {scheduler}\n"
    if re.search(r"^scheduler: (ssh|\"ssh\")$", text, re.M):
        text += "".join(line for key, line in SSH_BASE.items()
                        if not re.search(rf"^{key}:", text, re.M))
    path = tmp / "hostile-site.yaml"
    path.write_text(text)
    return str(path)


class Rendered:
    """A job that loaded: its script, checked statically; run for real when it is local."""

    def __init__(self, job, tmp: Path):
        self.job = job
        self.prep = prepare(job, "RUN_ID")
        self.tmp = tmp

    def check_static(self, payload: str, scripts: list[str]) -> None:
        """The directive table; the script itself goes to `scripts` (bash -n, shellcheck)."""
        text = self.prep.script
        # The header is the directive table, line for line: no value added a directive.
        cls = backend_class(self.prep.backend)
        header = [line for line in text.splitlines() if line.startswith("#SBATCH")]
        if self.prep.tasks:  # the array's: its first task's table, plus --array
            expected = len(cls().header(self.prep.tasks[0].plan.directives))
            assert len(header) == (expected + 1 if expected else 0)
        else:
            assert header == cls().header(self.prep.plan.directives)
        scripts.append(text)

    def run_locally(self, payload: str, field: str) -> None:
        """Run the job script of this machine with the stand-in interpreter; what would have
        started torchrun must have received everything byte-exact."""
        run_dir = Path(self.prep.run_dir)
        # As submit writes it: the script, bootstrap.json, and the rank side (which a container
        # job's supervisor runs on this machine).
        shutil.rmtree(run_dir, ignore_errors=True)  # (the previous payload's: same run id)
        script = _write_job_dir(self.prep, run_dir)
        Path(self.prep.plan.workdir).mkdir(parents=True, exist_ok=True)  # the code snapshot's place
        proc = subprocess.run(["bash", str(script)], capture_output=True, text=True,
                              cwd=self.tmp, env=dict(os.environ, HOSTILE_RECORD=str(self.tmp / "launch")),
                              timeout=60)
        records = sorted(self.tmp.glob("launch*.json"))
        if proc.returncode != 0:
            for rec in records:  # (record_failure ran the stand-in too): not the next payload's
                rec.unlink()
            # Expected here: a site's modules (this machine has no module system) fail where they
            # load; a container's runtime refuses the test's image ("i"), once it was started.
            # A container word's $NAME expands on the node by design (hpctrain/job/containers.py):
            # one this machine does not set stops the strict-mode script.
            said = proc.stdout + proc.stderr
            expected = ("(status " in said if field in NO_MODULE_SYSTEM else
                        "hpctrain: launch: " in said or
                        bool(ENV_REF.search(payload)) and "unbound variable" in said
                        if field.startswith("container.") else False)
            assert expected, \
                f"{field}={payload!r}: the job script exited {proc.returncode}:\n" \
                f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
            return
        assert records, proc.stderr
        # The launch, among the interpreter's other calls (the slow-rank verdict after it, …).
        launch = [str(run_dir / "rank"), "run", str(run_dir / "bootstrap.json")]
        launches = [seen for seen in (json.loads(r.read_text()) for r in records)
                    if seen["argv"][-3:] == launch]
        assert len(launches) == 1, [json.loads(r.read_text())["argv"] for r in records]
        [seen] = launches
        plan = self.prep.plan
        assert seen["argv"][:len(plan.python) - 1] == plan.python[1:]
        assert seen["cwd"] == self.prep.plan.workdir  # the snapshot's copy of the job's directory
        assert self.prep.plan.setup_dir == self.job.workdir
        for key, value in plan.env.items():
            assert seen["env"].get(key) == value, key
        for rec in records:
            rec.unlink()

    def run_probe(self, payload: str, field: str) -> None:
        """An ssh script's `job.sh probe head` (what submit runs on every host first), here:
        it passes, or names what is missing byte-exact; nothing in its messages executes."""
        prep = self.prep.tasks[0] if self.prep.tasks else self.prep  # a sweep: its first task's
        run_dir = Path(prep.run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        script = run_dir / "job.sh"
        script.write_text(prep.script)
        work = Path(prep.plan.workdir)  # the code snapshot's place, with the program
        work.mkdir(parents=True, exist_ok=True)
        program = prep.plan.scheduler["program_file"]
        if program and (self.tmp / program).is_file():
            (work / program).parent.mkdir(parents=True, exist_ok=True)
            (work / program).write_bytes((self.tmp / program).read_bytes())
        proc = subprocess.run(["bash", str(script), "probe", "head"], capture_output=True,
                              text=True, cwd=self.tmp, stdin=subprocess.DEVNULL, timeout=60,
                              env={k: v for k, v in os.environ.items() if k != "HOSTILE_RECORD"})
        out = f"{field}={payload!r}: probe exited {proc.returncode}:\n{proc.stdout}{proc.stderr}"
        if proc.returncode == 0:
            assert "hpctrain probe: ok host=" in proc.stdout, out
            return
        if field in NO_MODULE_SYSTEM and "(status " in proc.stderr:
            return
        assert proc.returncode == 3, out
        assert f"hpctrain probe: error: the program {program} is not there" in proc.stdout, out


# What an ssh probe reads (the program, the interpreter, the working directory, the run's
# place, the hosts and how they are reached): probed for real with each payload; the rest of
# the ssh script is the batch shell's, checked as the Slurm script is (bash -n, shellcheck).
PROBED = {"script", "library", "task", "config", "python", "args", "name", "runs_dir"} | SSH_ONLY

# Site fields that load modules: this machine has none, so the job stops where it loads them.
NO_MODULE_SYSTEM = ("modules", "module_init")


def _walk(fields, scheduler, tmp, payloads, build, then=None, count=True):
    """Every (field, payload) on a scheduler: refused, or rendered and checked statically;
    `then(field, payload, rendered)` is called on each rendered job, in the job's directory
    (the local tier runs some of them). The scripts come back for bash -n and shellcheck."""
    scripts: list[str] = []
    canary = tmp / "CANARY"
    outcomes = {"refused": 0, "rendered": 0}
    for field in fields:
        for payload in payloads:
            if count:
                tried("fields")
            cwd = os.getcwd()
            os.chdir(tmp)
            try:
                try:
                    job = build(field, payload)
                    rendered = Rendered(job, tmp)
                except HpctrainError as exc:
                    assert exc.what and "Traceback" not in str(exc)
                    outcomes["refused"] += 1
                    continue
                outcomes["rendered"] += 1
                if field == "python" and ENV_REF.fullmatch(payload):
                    continue  # `python: $VAR` names the node's interpreter: expanded by design
                rendered.check_static(payload, scripts)
                if then:
                    then(field, payload, rendered)
            finally:
                os.chdir(cwd)
            assert not canary.exists(), f"{field}={payload!r} ran a command"
    return scripts, outcomes


def _bash_n(scripts: list[str], tmp: Path) -> None:
    """bash -n on every script, in one bash process (one fork per script, no Python in between)."""
    d = tmp / "bash-n"
    d.mkdir(exist_ok=True)
    files = []
    for i, text in enumerate(scripts):
        path = d / f"{i}.sh"
        path.write_text(text)
        files.append(str(path))
    proc = subprocess.run(["bash", "-c", 'for f; do bash -n "$f" || echo "bash -n failed: $f"; done',
                           "bash-n", *files], capture_output=True, text=True)
    assert proc.returncode == 0 and not proc.stdout and not proc.stderr, \
        (proc.stdout + proc.stderr)[:4000]


def _job_walk(scheduler, tmp_path, then=None, count=True):
    """Every job field with every payload, on one backend: (scripts, outcomes)."""
    payloads = canary_payloads(str(tmp_path / "CANARY"))
    site = {"local": "local", "slurm": "slurm-generic"}.get(scheduler) \
        or _site_file(tmp_path, "name: lab\n", "ssh")
    (tmp_path / "train.py").write_text("pass\n")

    def build(field, payload):
        extra = JOB_FIELDS[field](payload)
        if scheduler in ("slurm", "ssh"):
            extra.setdefault("resources", {})
            extra["resources"] = dict(extra["resources"], nodes=2)
        return load_job(_job(extra, "train.py"), site=site)

    return _walk(JOB_FIELDS, scheduler, tmp_path, payloads, build, then, count)


def _site_walk(scheduler, tmp_path, then=None, count=True):
    """Every site field with every payload, on one backend: (scripts, outcomes)."""
    payloads = canary_payloads(str(tmp_path / "CANARY"))
    (tmp_path / "train.py").write_text("pass\n")
    fields = [f for f in SITE_FIELDS if scheduler == "ssh" or f not in SSH_ONLY]

    def build(field, payload):
        site = _site_file(tmp_path, _site_text(field, payload, tmp_path), scheduler)
        # (the site's one host, when the payload is its hosts: value)
        nodes = 1 if scheduler == "local" or field == "hosts" else 2
        return load_job(_job({"resources": {"nodes": nodes, "gpus_per_node": 2}}, "train.py"),
                        site=site)

    return _walk(fields, scheduler, tmp_path, payloads, build, then, count)


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_every_job_field_with_every_payload(scheduler, home, tmp_path):
    scripts, outcomes = _job_walk(scheduler, tmp_path)
    assert outcomes["refused"] and outcomes["rendered"]
    _bash_n(scripts, tmp_path)


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_every_site_field_with_every_payload(scheduler, home, tmp_path):
    scripts, outcomes = _site_walk(scheduler, tmp_path)
    assert outcomes["refused"] and outcomes["rendered"]
    _bash_n(scripts, tmp_path)


def _shellcheck(scripts: list[str], tmp: Path) -> None:
    """shellcheck on one script per distinct shape (the payloads are many; shellcheck is slow)."""
    chosen = list({len(s.splitlines()): s for s in scripts}.values())[:40]
    files = []
    for i, text in enumerate(chosen):
        path = tmp / f"check-{i}.sh"
        path.write_text(text)
        files.append(str(path))
    proc = subprocess.run([SHELLCHECK, "--severity=style", "--shell=bash", *files],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[:4000]


@pytest.mark.parametrize("field", sorted(JOB_FIELDS))
def test_control_characters_are_refused_in_every_job_field(field, home, tmp_path):
    (tmp_path / "train.py").write_text("pass\n")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        for payload in CONTROL:
            if field == "setup" and payload == "a\tb":
                continue  # a TAB in a setup line is shell, as the user wrote it
            tried("control")
            extra = JOB_FIELDS[field](payload) if field != "setup" else {"setup": [payload]}
            with pytest.raises(HpctrainError):  # (--site would override the job's own site)
                load_job(_job(extra, "train.py"), site=None if field == "site" else "slurm-generic")
    finally:
        os.chdir(cwd)


@pytest.mark.parametrize("field", sorted(SITE_FIELDS))
def test_control_characters_are_refused_in_every_site_field(field, home, tmp_path):
    for payload in CONTROL:
        if field == "hosts.file" and payload.replace("\n", "").isprintable():
            continue  # a hostfile is lines: its newlines separate hosts, by design
        tried("control")
        site = _site_file(tmp_path, _site_text(field, payload, tmp_path), "slurm")
        with pytest.raises(HpctrainError):
            load_job({"name": "x", "script": "t.py"}, site=site)


def test_runs_dir_and_working_directory_with_control_characters(home, tmp_path, monkeypatch):
    for payload in CONTROL:
        tried("control", 2)
        if "\x00" not in payload:  # no environment variable can hold a NUL
            monkeypatch.setenv("HPCTRAIN_RUNS_DIR", str(tmp_path / payload))
            with pytest.raises(HpctrainError, match=r"\$HPCTRAIN_RUNS_DIR"):
                load_job({"name": "x", "script": "t.py"})
            monkeypatch.delenv("HPCTRAIN_RUNS_DIR")
        weird = tmp_path / payload.replace("\x00", "0").replace("/", "_")
        weird.mkdir(exist_ok=True)
        monkeypatch.chdir(weird)
        if "\x00" in payload:
            load_job({"name": "x", "script": "t.py"})  # (a path cannot hold a NUL: it became 0)
        else:
            with pytest.raises(HpctrainError, match="current directory"):
                load_job({"name": "x", "script": "t.py"})


# ----------------------------------------------------------------------------- YAML traps

YAML_TRAPS = {
    "duplicate key": ("name: a\nresources:\n  nodes: 4\n  nodes: 1\n", "given twice, at lines 3 and 4"),
    "duplicate top key": ("name: a\nname: b\n", "given twice"),
    "alias": ("name: &n a\nscript: *n\n", "aliases are not accepted"),
    "merge key": ("base: &b {nodes: 2}\nresources:\n  <<: *b\n", "aliases are not accepted"),
    "alias bomb": ("a: &a ['x','x']\nb: &b [*a,*a]\nc: &c [*b,*b]\nd: &d [*c,*c]\n", "aliases"),
    "deep nesting": ("a: " + "[" * 10000 + "]" * 10000 + "\n", "nested deeper than 32"),
    "deep mapping": ("".join(" " * i + f"k{i}:\n" for i in range(60)) + " " * 60 + "x: 1\n",
                     "nested deeper"),
    "raw NUL": ("name: a\x00b\n", "not allowed"),
    "escaped NUL": ('name: "a\\0b"\n', "control character"),
    "not a mapping": ("- a\n- b\n", "must hold a mapping"),
    "bad indentation": ("name: a\n  script: b\n", "not valid YAML"),
    "tab indentation": ("name: a\nresources:\n\tnodes: 2\n", "not valid YAML"),
    "unquoted time": ("name: a\nscript: t.py\nresources: {time: 1:30:00}\n", 'quote it'),
    "list as args item": ("name: a\nscript: t.py\nargs: [[1, 2]]\n", "args.0"),
    "env list value": ("name: a\nscript: t.py\nenv: {A: [1, 2]}\n", "'env.A'"),
    "env bad key": ("name: a\nscript: t.py\nenv: {A-B: '1'}\n", "'A-B' is not a valid key"),
    "dot name": ("name: ..\nscript: t.py\n", "'name' is '..'"),
    "dot name 2": ("name: .\nscript: t.py\n", "'name' is '.'"),
    "long name": ("name: " + "a" * 300 + "\nscript: t.py\n", "'name'"),
    "trailing newline name": ('name: "a\\n"\nscript: t.py\n', "control character"),
    "arabic digits time": ('name: a\nscript: t.py\nresources: {time: "١٢:٠٠:٠٠"}\n', "resources.time"),
    "empty grid": ("name: a\nscript: t.py\nsweep: {grid: {}}\n", "the sweep is empty"),
    "empty grid values": ("name: a\nscript: t.py\nsweep: {grid: {env.X: []}}\n", "has no values"),
    "duplicate seeds": ("name: a\nscript: t.py\nsweep: {seeds: [1, 1]}\n", "repeats 1"),
    "huge sweep": ("name: a\nscript: t.py\nsweep: {grid: {env.A: [" + ",".join(map(str, range(1000)))
                   + "], env.B: [" + ",".join(map(str, range(1000))) + "]}}\n", "1000000 tasks"),
    "set through list": (None, "not an index"),
}


@pytest.mark.parametrize("trap", sorted(YAML_TRAPS))
def test_yaml_traps_are_clear_errors(trap, home, tmp_path, monkeypatch):
    text, expected = YAML_TRAPS[trap]
    tried("yaml")
    path = tmp_path / "job.yaml"
    path.write_text(text or "name: a\nscript: t.py\nargs: [x]\n")

    def never(*a, **k):
        raise AssertionError("the sweep was expanded before its size was checked")
    monkeypatch.setattr("hpctrain.job.load.sweep_points", never)
    with pytest.raises(HpctrainError) as err:
        load_job(str(path), site="localcluster",
                 overrides=["args.5=x"] if text is None else ())
    assert expected in str(err.value), str(err.value)
    assert str(err.value).count("\n") <= 3 and "Traceback" not in str(err.value)


def test_not_utf8_and_too_large(home, tmp_path):
    tried("yaml", 3)
    path = tmp_path / "job.yaml"
    path.write_bytes(b"name: a\nscript: caf\xe9.py\n")
    with pytest.raises(HpctrainError, match=r"job.yaml:2: not UTF-8"):
        load_job(str(path))
    path.write_bytes(b"name: a\n#" + b"x" * (1 << 20) + b"\n")
    with pytest.raises(HpctrainError, match="larger than 1 MiB"):
        load_job(str(path))
    with pytest.raises(HpctrainError, match="is a directory"):
        load_job(str(tmp_path))


def test_port_rule_stays_below_65536(home, tmp_path):
    tried("fields", 2)
    site = _site_file(tmp_path, "name: p\nport: {base: 65000, span: 2000}\n", "slurm")
    with pytest.raises(HpctrainError, match="reaches port 66999"):
        load_job({"name": "x", "script": "t.py"}, site=site)
    site = _site_file(tmp_path, "name: p\nport: {fixed: 80}\n", "slurm")
    with pytest.raises(HpctrainError, match="port.fixed"):
        load_job({"name": "x", "script": "t.py"}, site=site)


def test_site_from_the_environment_says_so(home, monkeypatch):
    tried("fields")
    monkeypatch.setenv("HPCTRAIN_SITE", "/etc/passwd")
    with pytest.raises(HpctrainError, match=r"from \$HPCTRAIN_SITE"):
        load_job({"name": "x", "script": "t.py"})


# ----------------------------------------------------------------------------- Hypothesis

TEXT = st.text(st.characters(codec="utf-8"), max_size=40)
FAST = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


@FAST
@given(TEXT)
def test_yaml_loader_answers_any_text_with_a_document_or_an_error(text):
    tried("hypothesis")
    try:
        doc = load_text(text, "gen.yaml")
    except HpctrainError:
        return
    assert isinstance(doc, dict)


@FAST
@given(st.text(st.characters(exclude_categories=("Cs",)), max_size=60))
def test_quoting_round_trips(value):
    tried("hypothesis")
    if "\x00" in value:
        return  # no C string carries a NUL; the loader refuses it before quoting is reached
    assert shlex.split(_q(value)) == [value]


@FAST
@given(st.text(max_size=60))
def test_comment_text_cannot_end_the_line(value):
    tried("hypothesis")
    out = _comment(value)
    # Whatever the value holds (U+2028 included, which ends a line for Python but not for bash).
    assert not any(ch in out for ch in "\n\r\x00\x0b\x0c\x1c\x1d\x1e\x85"), repr(out)
    assert len((out + "\n").encode().splitlines()) == 1, repr(out)


@FAST
@given(st.lists(TEXT, max_size=4), st.dictionaries(st.from_regex(r"[A-Z][A-Z0-9_]{0,6}", fullmatch=True),
                                                   TEXT, max_size=3))
def test_any_arguments_reach_bootstrap_json_unchanged_or_are_refused(args, env):
    tried("hypothesis")
    try:
        job = load_job({"name": "gen", "script": "t.py", "args": args, "env": env},
                       site="localcluster")
    except HpctrainError:
        assert any(_has_control(a) for a in args + list(env.values()))
        return
    plan = prepare(job, "RUN_ID").plan
    assert plan.bootstrap["program"] == ["t.py", *args]
    for key, value in env.items():
        assert plan.env[key] == value


def _has_control(text: str) -> bool:
    return any(ord(c) < 32 or 127 <= ord(c) < 160 for c in text)
