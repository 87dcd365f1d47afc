"""Hosts reached over ssh, no scheduler: workstations, a lab's GPU boxes (`scheduler: ssh`).

    name: lab
    scheduler: ssh
    hosts: ws[1-4]                # a Slurm-style list, a YAML list, or a hostfile (a path)
    ssh: {user: me, identity: ~/.ssh/id_ed25519, host_key: accept-new}
    sync: shared                  # or rsync (copies the run directory; code: true, the code)

Templates: templates/ssh/ (the job script is the job's batch shell on the first host, the head;
it starts one step per host over ssh as srun does on Slurm; see job.sh.j2 for its modes).

submit: one connection per host (backends/ssh/openssh.py), the run directory copied to each host first when
the site says sync: rsync, every host probed (`job.sh probe`: the run directory is there, the
working directory, the interpreter, the program, the tools; on the head, a fixed port that is
free) — a host that cannot run the job is named before anything starts — then `job.sh start` on
the head starts the batch shell detached, whose pid and start time run.json records. The state
is the batch shell's: alive on the head (asked over ssh, one command per head for any number of
runs), and its exit status in status/exit_code. cancel: `job.sh stop` on every host (every
process of the run, by its run directory: TERM, then KILL). With sync: rsync the hosts' files
are brought back while the run is followed (logs, notes, results) and whole once it ended.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ...errors import HpctrainError
from ...runs.records import Run
from . import openssh
from ..base import Backend, JobState, State
from ..commands import SchedulerError
from ..summary import fmt_elapsed, summarise

if TYPE_CHECKING:
    from ...schema.spec import SiteProfile

# On a host: whether the run directory is there (a shared filesystem that is not shared is named
# here, not met as a hang), then the script's own probe.
_PROBE = ('script=$1; shift; if [[ ! -r $script ]]; then echo "hpctrain probe: missing: '
          '$(hostname)"; exit 3; fi; exec bash "$script" probe "$@"')
_STOP = ('if [[ ! -r $1 ]]; then echo "hpctrain stop: $(hostname): no copy of the run here"; '
         'exit 0; fi; exec bash "$1" stop')
# PID START pairs -> one line each: 1 while that process (not a later one with its pid) lives.
_ALIVE = ('while (( $# >= 2 )); do s=$(sed "s/^.*) //" "/proc/$1/stat" 2>/dev/null | '
          "awk '{print $1, $20}') || s=; if [[ -n $s && ${s%% *} != Z && ${s#* } == \"$2\" ]]; "
          'then echo 1; else echo 0; fi; shift 2; done')
SHELL_PID = "shell-pid"  # status/: the interactive shell's "PID START" on the first host
_PUSHED = ["/job.sh", "/rank/", "/bootstrap.json", "/job.yaml", "/run.json", "/.submitting",
           "/tasks/*/job.sh", "/tasks/*/rank/", "/tasks/*/bootstrap.json", "/tasks/*/job.yaml"]
# While a run is followed: what `status` and `logs` read. Once it ended: everything.
_FOLLOWED = ["--include=/tasks/", "--include=/tasks/*/", "--include=logs/***",
             "--include=status/***", "--include=results/***", "--exclude=*"]


def sync_rule(site: SiteProfile) -> tuple[str, bool, list[str]]:
    """(mode, copy the code, the code's excludes) of a site's `sync:`."""
    sync = site.sync
    if isinstance(sync, str):
        return sync, False, []
    return sync.mode, sync.code, list(sync.exclude)


def _site_source(job) -> str:
    origins = getattr(job, "origins", None)
    return origins.site_doc.source if origins is not None else ""


class SshBackend(Backend):
    # One ssh command on the head per query (over the run's shared connection): twice a second.
    poll = (0.5, 0.5)
    name = "ssh"
    script_name = "job.sh"
    no_spares = ""  # the site's hosts after the job's (templates/ssh/spares.sh.j2)
    step_launcher = "ssh 1 step/host"
    head_node = "first host"

    # ------------------------------------------------------------------------------ checks

    @classmethod
    def check_site(cls, site, doc) -> None:
        if site.hosts is None:
            raise HpctrainError(f"site '{site.name}' uses scheduler ssh but names no hosts",
                                doc.where(("scheduler",)),
                                "add hosts: ws[1-4] (a Slurm-style list), a list [ws1, ws2], or a "
                                "hostfile path (./lab-hosts: one host a line)")
        try:
            openssh.site_hosts(site.hosts, doc.source)
        except ValueError as exc:
            raise HpctrainError(f"hosts: {exc}", doc.where(("hosts",)),
                                "host names or IPv4 addresses, e.g. hosts: ws[1-4] or "
                                "hosts: [ws1, 10.0.0.7]") from None
        openssh.check_section(site.ssh, doc)

    @classmethod
    def check_record(cls, run: Run) -> None:
        """run.json's `ssh` section (what submit recorded): hosts, the ssh command line, the
        sync mode, each checked; status/logs/cancel rebuild their commands from these parts."""
        info = run.record.extra.get("ssh")
        if info is None:
            return
        where = f"{run.path / 'run.json'}: 'ssh"
        try:
            if not isinstance(info, dict):
                raise ValueError(f"{where}' is not a mapping")
            hosts = info.get("hosts")
            if not (isinstance(hosts, list) and 1 <= len(hosts) <= 4096):
                raise ValueError(f"{where}.hosts' is not a list of 1 to 4096 hosts")
            for i, host in enumerate(hosts):
                openssh.checked_host(host, f"{where}.hosts[{i}]'")
            openssh.checked_words(info.get("ssh"), f"{where}.ssh'")
            openssh.checked_timeout(info.get("connect_timeout"), f"{where}.connect_timeout'")
            if info.get("sync") not in (None, "rsync", "shared", "none"):
                raise ValueError(f"{where}.sync' is not a sync mode")
        except ValueError as exc:
            raise HpctrainError(f"{exc}", fix="restore run.json (hpctrain writes it at submit) "
                                "or remove that run directory; its values are never run") from None

    @classmethod
    def check_job(cls, spec, site, where) -> list[str]:
        hosts = openssh.site_hosts(site.hosts, where.site_doc.source)
        nodes, spares = spec.resources.nodes, spec.resources.spare_nodes
        if nodes > len(hosts):
            from .hostlist import compress
            raise HpctrainError(f"'resources.nodes' is {nodes}, but site '{site.name}' has "
                                f"{len(hosts)} host(s): {compress(hosts)}",
                                where(("resources", "nodes")),
                                f"ask for {len(hosts)} or fewer, or add hosts to the site "
                                f"({where.site(('hosts',))})")
        if nodes + spares > len(hosts):
            from .hostlist import compress
            raise HpctrainError(f"'resources.spare_nodes' is {spares}, but site '{site.name}' has "
                                f"{len(hosts)} host(s) ({compress(hosts)}): {nodes} for the job "
                                f"leave {len(hosts) - nodes} to be its spares",
                                where(("resources", "spare_nodes")),
                                f"ask for {len(hosts) - nodes} spare(s) or fewer, or add hosts to "
                                f"the site ({where.site(('hosts',))})")
        return openssh.site_notes(site, where)

    @classmethod
    def job_gpus(cls, job):
        """The GPU names nvidia-smi gives on each host the job would start on (over ssh, at
        validate and submit): every one must render for a video job."""
        from ...rank.before.gpu_models import SMI_QUERY, smi_names
        from ...rank.printable import clean
        from ..base import JobGpus
        site, r = job.site, job.spec.resources
        hosts = openssh.site_hosts(site.hosts, _site_source(job))[:r.nodes]
        ssh = openssh.Ssh(openssh.ssh_words(site.ssh), site.ssh.connect_timeout)
        answers = ssh.run_many({h: ["nvidia-smi", *SMI_QUERY] for h in hosts}, timeout=60)
        names, said = [], []
        for host in hosts:
            result = answers[host]
            found = smi_names(result.stdout) if result.status == 0 else []
            if not found:  # one host that cannot say leaves the whole job unknown
                why = (openssh.problem(result, site.ssh.connect_timeout)[0]
                       if result.status == 255 else
                       clean(" ".join((result.stdout + result.stderr).split()), 200))
                return JobGpus(f"host {host}", [], f"nvidia-smi on {host} gave no GPU name "
                               f"(exit {result.status}): {why or 'no output'}")
            names += found
            said.append(f"{host}: {', '.join(dict.fromkeys(found))}")
        return JobGpus("host " + ", ".join(hosts) if len(hosts) == 1 else
                       "hosts " + ", ".join(hosts), names, "nvidia-smi on " + "; ".join(said))

    @classmethod
    def plan_values(cls, job) -> dict:
        from ...libraries import adapter
        site, spec = job.site, job.spec
        hosts = openssh.site_hosts(site.hosts, _site_source(job))
        program = adapter(spec.library).program(spec)
        first = program[0] if program else ""
        is_file = bool(first) and not first.startswith("-") and ("/" in first or first.endswith(".py"))
        # With resources.spare_nodes the hosts after the job's are its spares: every host is
        # probed, started from and stopped on; each attempt runs on `nodes` of them.
        r = spec.resources
        return {"hosts": hosts[:r.nodes + r.spare_nodes], "ssh": openssh.ssh_words(site.ssh),
                "sync": sync_rule(site)[0], "program_file": first if is_file else None,
                "max_excluded": spec.preemption.max_excluded_nodes}

    # ------------------------------------------------------------------------------ submit

    def submit_command(self, script: Path, plan=None) -> list[str]:
        head = plan.scheduler["hosts"][0] if plan is not None and plan.scheduler else "HEAD"
        return ["ssh", head, "bash", str(script), "start"]

    def submit(self, run: Run, prep) -> str:
        plan = prep.tasks[0].plan if prep.tasks else prep.plan
        values = plan.scheduler
        hosts, site = values["hosts"], prep.job.site
        mode, code, excludes = sync_rule(site)
        record = {"hosts": hosts, "ssh": values["ssh"], "sync": mode,
                  "connect_timeout": site.ssh.connect_timeout}
        rec = run.record
        # Recorded first: a submit killed from here on leaves a run that cancel can stop.
        run.update(extra=dict(rec.extra, ssh=record))
        ssh = openssh.Ssh(values["ssh"], site.ssh.connect_timeout)
        where = prep.job.origins.site(("hosts",)) if prep.job.origins is not None else None
        secrets = b"".join(f"{name}\0{_env(name)}\0".encode() for name in plan.secrets)
        if mode == "rsync":
            self._push(ssh, hosts, run.path, prep.job.workdir if code else None, excludes, where)
        script = run.path / "tasks" / "0" / "job.sh" if prep.tasks else run.path / "job.sh"
        return self._start(run, ssh, hosts, script, secrets, mode, where)

    def _start(self, run: Run, ssh, hosts, script: Path, secrets: bytes, mode, where) -> str:
        """Every host probed, then the batch shell started on the head; its pid recorded."""
        timeout = ssh.connect_timeout
        probes = ssh.run_many({host: ["bash", "-c", _PROBE, "hpctrain", str(script),
                                      *(["head"] if i == 0 else [])]
                               for i, host in enumerate(hosts)}, input=secrets, timeout=300)
        self._check_probes(probes, hosts, run.path, mode, where, timeout)
        started = ssh.run(hosts[0], ["bash", str(run.path / "job.sh"), "start"], input=secrets,
                          timeout=120 + (timeout or 0) * 2)
        pid, start = _started(started)
        if pid is None:
            what, fix = self._start_problem(started, timeout)
            raise HpctrainError(what, where, fix)
        run.update(pid=pid, pid_start=start, submitted_ts=time.time())
        self._started = (ssh, hosts, run.path)
        return f"{hosts[0]}:{pid}"

    def resubmit(self, run: Run, exclude: list[str]) -> str:
        """`submit --resume`: the run's own job script started again on its hosts (a stopped
        run continues from its checkpoint). The hosts are the run's; there is none to leave out."""
        from ...runs.untrusted import job_secrets
        info = _info(run)
        if info is None:
            raise HpctrainError(f"run {run.id} has no record of its hosts (run.json's ssh)",
                                fix="submit the job file again (a new run)")
        # The ended job's exit status and cancel would be read as the new job's.
        (run.path / "status" / "exit_code").unlink(missing_ok=True)
        run.update(cancelled=None, extra=dict(run.record.extra, ssh=dict(info, fetched=False)))
        ssh, hosts = _ssh(run), info["hosts"]
        secrets = b"".join(f"{name}\0{_env(name)}\0".encode() for name in job_secrets(run.path))
        if info.get("sync") == "rsync":  # what the hosts saved, brought here, goes back to all
            self._push(ssh, hosts, run.path, None, [], None)
        return self._start(run, ssh, hosts, run.path / "job.sh", secrets, info.get("sync"), None)

    def _push(self, ssh, hosts, run_dir: Path, code: str | None, excludes, where) -> None:
        """sync: rsync: the run directory (and the code) to the same path on every host."""
        dirs = [str(run_dir)] + ([code] if code else [])
        made = ssh.run_many({h: ["mkdir", "-p", "--", *dirs] for h in hosts}, timeout=120)
        self._fail([r for r in made.values() if r.status != 0], where, ssh.connect_timeout,
                   "cannot make the run directory on")
        from concurrent.futures import ThreadPoolExecutor
        code_excludes = list(excludes)
        if code:
            runs = Path(run_dir).parent.parent
            try:  # the runs directory inside the code: not copied with it (the run is, alone)
                code_excludes.append("/" + str(runs.relative_to(code)) + "/")
            except ValueError:
                pass
        jobs = [(h, str(run_dir), ["/.submitting"]) for h in hosts]
        jobs += [(h, code, code_excludes) for h in hosts] if code else []
        with ThreadPoolExecutor(max_workers=min(32, len(jobs))) as pool:
            results = list(pool.map(lambda j: ssh.rsync(j[0], j[1], j[1], j[2]), jobs))
        self._fail([r for r in results if r.status != 0], where, ssh.connect_timeout,
                   "cannot copy the run to")

    @staticmethod
    def _fail(failed, where, timeout, doing: str) -> None:
        if not failed:
            return
        parts, fixes = [], []
        for r in failed:
            what, fix = openssh.problem(r, timeout)
            parts.append(what if what.startswith(r.host) or r.host in what else f"{r.host}: {what}")
            fixes.append(fix)
        raise HpctrainError(f"{doing} {', '.join(r.host for r in failed)}: " + "; ".join(parts),
                            where, fixes[0])

    def _check_probes(self, probes, hosts, run_dir: Path, mode, where, timeout) -> None:
        """Every host's probe passed, or one error naming each host that cannot run the job
        (hosts with the same problem together) and the fix of the first."""
        problems: dict[str, list[str]] = {}
        fixes: dict[str, str] = {}
        names: dict[str, list[str]] = {}
        for host in hosts:
            r = probes[host]
            said = {}
            for line in r.stdout.splitlines():
                if line.startswith("hpctrain probe: "):
                    key, _, text = line[len("hpctrain probe: "):].partition(" ")
                    said[key.rstrip(":")] = text
            if r.status == 0 and "ok" in said:
                fields = dict(w.split("=", 1) for w in said["ok"].split() if "=" in w)
                names.setdefault(fields.get("host", host), []).append(host)
                continue
            if r.status == 255:
                what, fix = openssh.explain(host, r.stderr, timeout)
                problems.setdefault(what, []).append("")
                fixes.setdefault(what, fix)
                continue
            if "missing" in said:
                what = (f"the run directory {run_dir} is not there: the hosts do not share the "
                        "filesystem it is on")
                fix = ("put runs_dir (or $HPCTRAIN_RUNS_DIR) on a filesystem every host mounts at "
                       "the same path (an NFS home), or set the site's sync: rsync")
            elif "error" in said:
                what, fix = said["error"], said.get("fix", "see the message")
            else:
                tail = " ".join((r.stdout + "\n" + r.stderr).split())[-500:]
                what = f"the job's environment fails there (exit status {r.status}): {tail or 'no output'}"
                fix = "run the site's modules and setup lines and the job's setup there by hand"
            problems.setdefault(what, []).append(host)
            fixes.setdefault(what, fix)
        if problems:
            parts = [f"{', '.join(h for h in hs if h)}: {what}" if any(hs) else what
                     for what, hs in problems.items()]
            raise HpctrainError("; ".join(parts), where, fixes[next(iter(problems))])
        same = {name: hs for name, hs in names.items() if len(hs) > 1}
        if same:
            name, hs = next(iter(same.items()))
            raise HpctrainError(f"{' and '.join(hs)} are the same machine (hostname {name}): "
                                "one torchrun per host", where, "name each host once in hosts")

    @staticmethod
    def _start_problem(started, timeout) -> tuple[str, str]:
        head = started.host
        if started.status == 255:
            return openssh.explain(head, started.stderr, timeout)
        unreachable = [line.split(": ", 2)[1:] for line in started.stdout.splitlines()
                       if line.startswith("hpctrain start: unreachable: ")]
        if unreachable:
            parts, fix = [], None
            for host, said in (u for u in unreachable if len(u) == 2):
                what, how = openssh.explain(host, said, timeout)
                parts.append(what)
                fix = fix or how
            return (f"from the head {head}: {'; '.join(parts)}",
                    f"{fix} (the head starts the other hosts' steps over ssh, with the site's ssh: "
                    f"settings: it must reach them as this machine does)")
        tail = " ".join((started.stdout + started.stderr).split())[-500:]
        return (f"the job did not start on {head}: {tail or 'exit status %d' % started.status}",
                f"see {head}'s message above")

    # ------------------------------------------------------------------------------ shell

    # `hpctrain shell`: a shell on the first host (ssh -t) with the job's environment;
    # `hpctrain launch` in it runs the job script itself there, as its batch shell, in the
    # foreground (templates/ssh/launch.sh.j2 is job.sh.j2).
    shell_roots = ("shell.sh.j2", "launch.sh.j2")
    shell_takes_secrets = False  # ssh -t: the shell's standard input is the terminal

    def stage(self, run: Run, prep) -> None:
        """The hosts recorded in run.json (status, attach and cancel find them there); a site
        whose hosts keep their own copies (sync: rsync) is refused: the shell's records are
        written on the first host."""
        site = prep.job.site
        mode = sync_rule(site)[0]
        if mode == "rsync":
            raise HpctrainError(f"hpctrain shell needs the run directory shared with the hosts; "
                                f"site '{site.name}' copies it to them (sync: rsync)",
                                prep.job.origins.site(("sync",)) if prep.job.origins else None,
                                "submit the job (hpctrain submit JOB), or use a site whose hosts "
                                "share the runs directory (sync: shared)")
        values = prep.plan.scheduler
        run.update(extra=dict(run.record.extra, ssh={
            "hosts": values["hosts"], "ssh": values["ssh"], "sync": mode,
            "connect_timeout": site.ssh.connect_timeout}))

    def shell_command(self, plan, rcfile: Path, record: Path) -> list[str]:
        """ssh -t to the first host, bash there with the rcfile; it writes its pid and start time
        (status: alive while the shell is), then its id (HEAD:PID) to RECORD. RECORD comes last:
        its appearance is what tells hpctrain both are there to be read."""
        head = plan.scheduler["hosts"][0]
        ssh = openssh.Ssh(plan.scheduler["ssh"])
        command = ssh.command(head, [
            "bash", "-c",
            'printf "%s %s\\n" "$$" "$(sed "s/^.*) //" /proc/$$/stat | cut -d " " -f 20)" >"$3" '
            '&& printf "%s:%s\\n" "$1" "$$" >"$2" && shift 3 && exec "$@"',
            "hpctrain-shell", head, str(record),
            str(record.parent / SHELL_PID), "bash", "--rcfile", str(rcfile), "-i"])
        at = command.index("--")
        return [*command[:at], "-t", *command[at:]]

    def shell_record(self, run: Run) -> dict:
        import re
        from ...runs.untrusted import read_text
        try:  # run-directory data: bounded, a regular file, checked by a full match
            text = read_text(run.path / "status" / SHELL_PID, limit=64).strip()
        except OSError:
            return {}
        m = re.fullmatch(r"([0-9]{1,9}) ([0-9]{1,20})", text)
        return {"pid": int(m.group(1)), "pid_start": m.group(2),
                "submitted_ts": time.time()} if m else {}

    def inside(self, job_id: str) -> bool:
        from ..local import under
        return under(job_id.rpartition(":")[2])

    # ------------------------------------------------------------------------------ state

    def states(self, runs: list[Run]) -> list[JobState]:
        alive: dict[Path, bool] = {}
        by_head: dict[str, list[Run]] = {}
        for run in runs:
            info = _info(run)
            if info is None or not run.record.pid:
                alive[run.path] = False
            else:
                by_head.setdefault(info["hosts"][0], []).append(run)
        for head, group in by_head.items():
            ssh = _ssh(group[0])
            args = [str(a) for run in group for a in (run.record.pid, run.record.pid_start)]
            r = ssh.run(head, ["bash", "-c", _ALIVE, "hpctrain", *args], timeout=60)
            flags = r.stdout.split()
            if r.status != 0 or len(flags) != len(group):
                what, fix = openssh.problem(r, ssh.connect_timeout)
                raise SchedulerError(["ssh", head], r.status, r.stderr, what=what, fix=fix)
            alive.update({run.path: flag == "1" for run, flag in zip(group, flags)})
        out = []
        for run in runs:
            info = _info(run) or {}
            rsync = info.get("sync") == "rsync"
            if rsync:
                self._pull(run, whole=not alive[run.path])
            st = self._state(run, alive[run.path], info.get("hosts") or [])
            if rsync and st.done and alive[run.path]:  # it ended since it was asked: all of it
                self._pull(run, whole=True)
            out.append(st)
        return out

    def _state(self, run: Run, alive: bool, hosts: list[str]) -> JobState:
        from .hostlist import compress
        from ..local import LocalBackend
        rec = run.record
        if rec.array_size:
            tasks = [LocalBackend.task_state(run.path / "tasks" / str(i), alive, rec.cancelled,
                                             f"{rec.job_id}_{i}") for i in range(rec.array_size)]
            for t in tasks:
                if t.state == State.RUNNING:
                    t.nodes = compress(hosts)
            return summarise(str(rec.job_id), tasks)
        st = LocalBackend.task_state(run.path, alive, rec.cancelled, str(rec.job_id))
        hosts = _attempt_hosts(run, hosts)
        if st.state == State.RUNNING:
            st.nodes = compress(hosts)
            if rec.submitted_ts:
                st.elapsed = fmt_elapsed(time.time() - rec.submitted_ts)
        elif st.state == State.PENDING:  # job.out is written by the start: only rsync gets here
            st.state, st.reason = State.RUNNING, None
            st.nodes = compress(hosts)
        return st

    def adopt(self, run: Run) -> str | None:
        """A submit killed after the start: the batch shell wrote status/pid on the head."""
        info = _info(run)
        if info is None:
            return None
        head, ssh = info["hosts"][0], _ssh(run)
        script = str(run.path / "job.sh")
        r = ssh.run(head, ["bash", "-c",
                           'pid=$(cat "$1/status/pid" 2>/dev/null) || exit 0; '
                           'tr "\\0" " " <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "$2" || exit 0; '
                           'echo "$pid $(sed "s/^.*) //" "/proc/$pid/stat" | cut -d " " -f 20)"',
                           "hpctrain", str(run.path), script], timeout=60)
        if r.status == 255:
            what, fix = openssh.explain(head, r.stderr, ssh.connect_timeout)
            raise SchedulerError(["ssh", head], 255, r.stderr, what=what, fix=fix)
        words = r.stdout.split()
        if len(words) != 2 or not words[0].isdigit():
            return None
        run.update(pid=int(words[0]), pid_start=words[1], submitted_ts=time.time())
        return f"{head}:{words[0]}"

    # ------------------------------------------------------------------------------ control

    def cancel(self, run: Run) -> None:
        """`job.sh stop` on every host at once: TERM to every process of the run there (the
        batch shell, the steps, torchrun, the ranks and what they started), KILL what is left
        10 s later."""
        run.update(cancelled=time.time())
        info = _info(run)
        if info is None:
            return
        self._stop(_ssh(run), info["hosts"], run.path)

    def _stop(self, ssh, hosts, run_dir: Path) -> None:
        results = ssh.run_many({h: ["bash", "-c", _STOP, "hpctrain", str(run_dir / "job.sh")]
                                for h in hosts}, timeout=60)
        failed = [r for r in results.values() if r.status != 0]
        if failed:
            what = "; ".join(openssh.problem(r, ssh.connect_timeout)[0] for r in failed)
            raise SchedulerError(["ssh"], failed[0].status, failed[0].stderr,
                                 what=f"could not stop the run on {', '.join(r.host for r in failed)}: {what}",
                                 fix="cancel it again once the host is reachable (or stop its "
                                 "processes there by hand: bash RUN_DIR/job.sh stop)")

    def abort(self, job_id: str) -> None:
        started = getattr(self, "_started", None)
        if started is not None:
            ssh, hosts, run_dir = started
            try:
                self._stop(ssh, hosts, run_dir)
            except SchedulerError:
                pass

    # ------------------------------------------------------------------------------ attach

    def job_nodes(self, run: Run) -> list[str]:
        info = _info(run)
        if info is None or self.state(run).state != State.RUNNING:
            return []
        return list(info["hosts"])

    def attach_command(self, run: Run, node: str) -> list[str]:
        """ssh -t to the host, a login shell's bash in the run directory."""
        cmd = _ssh(run).command(node, ["bash", "-c", 'cd "$1" 2>/dev/null; exec bash -i',
                                       "hpctrain-attach", str(run.path)])
        at = cmd.index("--")
        return [*cmd[:at], "-t", *cmd[at:]]

    def on_nodes(self, run: Run, command: list[str]) -> str:
        info = _info(run) or {}
        if info.get("sync") == "rsync":
            raise HpctrainError(f"run {run.id}'s hosts keep their own logs (sync: rsync): "
                                "attach --stacks reads them where they are shared only",
                                fix=f"hpctrain attach {run.id} --node HOST, then kill -QUIT a "
                                "rank's pid (status/rank-R.json): its log shows the stack")
        ssh = _ssh(run)
        results = ssh.run_many({host: command for host in self.job_nodes(run)}, timeout=60)
        for r in results.values():
            if r.status != 0:
                what, fix = openssh.problem(r, ssh.connect_timeout)
                raise HpctrainError(f"could not reach {r.host} for run {run.id}: {what}", fix=fix)
        return "".join(r.stdout for r in results.values())

    def output_files(self, run: Run, task: int | None = None) -> list[Path]:
        from ..local import LocalBackend
        return LocalBackend().output_files(run, task)

    def fetch(self, run: Run) -> None:
        info = _info(run) or {}
        if info.get("sync") != "rsync" or info.get("fetched"):
            return
        self._pull(run, whole=run.record.final)

    def _pull(self, run: Run, whole: bool) -> None:
        """sync: rsync: the hosts' files here. While the run goes on only what status and logs
        read; once it ended, everything (then never again)."""
        info, ssh = _info(run), _ssh(run)
        from concurrent.futures import ThreadPoolExecutor
        filters = _PUSHED + ([] if whole else _FOLLOWED)
        with ThreadPoolExecutor(max_workers=min(32, len(info["hosts"]))) as pool:
            results = list(pool.map(lambda h: ssh.rsync(h, str(run.path), str(run.path), filters,
                                                         pull=True), info["hosts"]))
        failed = [r for r in results if r.status != 0]
        for r in failed:
            print(f"hpctrain: could not bring {r.host}'s files of run {run.id} here: "
                  f"{openssh.problem(r, ssh.connect_timeout)[0]}", file=sys.stderr)
        if whole and not failed:
            run.update(extra=dict(run.record.extra, ssh=dict(info, fetched=True)))


def _attempt_hosts(run: Run, hosts: list[str]) -> list[str]:
    """With spares (resources.spare_nodes): the hosts the running attempt chose, among the run's
    own (status/spares.json is the run directory's); else, or before the first choice, all."""
    from ...rank.before.spares import chosen_nodes
    chosen = [h for h in chosen_nodes(str(run.path)) if h in hosts]
    return chosen or hosts


def _env(name: str) -> str:
    import os
    return os.environ.get(name, "")


def _info(run: Run) -> dict | None:
    SshBackend.check_record(run)  # every run of a group, not only the one for_run was given
    info = run.record.extra.get("ssh")
    return info if isinstance(info, dict) and info.get("hosts") else None


def _ssh(run: Run) -> openssh.Ssh:
    """The run's ssh command line as ssh_words writes it (run.json's, checked by _info: exactly
    those words, from options a site profile may give)."""
    info = _info(run) or {}
    words = openssh.checked_words(info["ssh"], f"{run.path / 'run.json'}: 'ssh.ssh'") \
        if info.get("ssh") else ["ssh"]
    return openssh.Ssh(words, info.get("connect_timeout"))


def _started(result) -> tuple[int | None, str | None]:
    if result.status != 0:
        return None, None
    for line in result.stdout.splitlines():
        if line.startswith("hpctrain start: pid="):
            fields = dict(w.split("=", 1) for w in line.split()[2:] if "=" in w)
            if fields.get("pid", "").isdigit():
                return int(fields["pid"]), fields.get("start") or None
    return None, None
