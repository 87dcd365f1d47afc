"""Per-job scheduler options (the job key `sbatch:`): which ones a job may pass, and how.

The directive table (plan.directive_table) speaks Slurm's option names, so these do too. A job
may add any option hpctrain does not decide itself — reservation, mail-type/mail-user, exclude,
nodelist, begin, licenses, comment, ... An option hpctrain owns (nodes, ntasks-per-node, output,
signal, ...) is refused with the job key that sets it: written twice, the two would drift and the
launch would not match the allocation. A site may forbid options (`sbatch_forbid`) and drops the
directives it rejects (`sbatch_skip`); a job naming either is refused too.

Values reach the script only as `#SBATCH --key=value` lines, which sbatch reads itself: printable
ASCII without `"` or `\\`; the backend quotes a value with spaces or `#` (SlurmBackend.header).
"""
from __future__ import annotations

import re

from ..errors import HpctrainError, nearest

# sbatch's long options (Slurm 22.05 - 24.11), to catch a misspelt one before sbatch does. An
# option missing here (a newer Slurm) is passed on with a warning, never refused.
KNOWN = frozenset("""
account acctg-freq array batch bb bbf begin chdir cluster-constraint clusters comment constraint
container container-id contiguous core-spec cores-per-socket cpu-freq cpus-per-gpu cpus-per-task
deadline delay-boot dependency distribution error exclude exclusive export export-file extra
extra-node-info get-user-env gid gpu-bind gpu-freq gpus gpus-per-node gpus-per-socket
gpus-per-task gres gres-flags hint hold ignore-pbs input job-name kill-on-invalid-dep licenses
mail-type mail-user mcs-label mem mem-bind mem-per-cpu mem-per-gpu mincpus network nice no-kill
no-requeue nodefile nodelist nodes ntasks ntasks-per-core ntasks-per-gpu ntasks-per-node
ntasks-per-socket open-mode output overcommit oversubscribe parsable partition power prefer
priority profile propagate qos quiet reboot requeue reservation segment signal sockets-per-node
spread-job switches test-only thread-spec threads-per-core time time-min tmp tres-bind
tres-per-task uid use-min-nodes verbose wait wait-all-nodes wckey wrap
""".split())

# Short options, named so that the error can give the long one.
SHORT = {"A": "account", "a": "array", "b": "begin", "C": "constraint", "c": "cpus-per-task",
         "D": "chdir", "d": "dependency", "e": "error", "F": "nodefile", "G": "gpus",
         "H": "hold", "i": "input", "J": "job-name", "k": "no-kill", "L": "licenses",
         "M": "clusters", "m": "distribution", "N": "nodes", "n": "ntasks", "o": "output",
         "O": "overcommit", "p": "partition", "Q": "quiet", "q": "qos", "s": "oversubscribe",
         "S": "core-spec", "t": "time", "W": "wait", "w": "nodelist", "x": "exclude"}

_RANKS = ("resources.procs_per_node (ranks per node: hpctrain starts one launcher per node, "
          "which starts them)")
_GPUS = ("resources.gpus_per_node (one GPU count, used for the request and the launch; "
         "every rank sees all of its node's GPUs)")
# Options hpctrain writes itself -> the job key to use instead.
OWNED = {
    "nodes": "resources.nodes",
    "ntasks": _RANKS, "ntasks-per-node": _RANKS, "ntasks-per-socket": _RANKS,
    "ntasks-per-core": _RANKS, "ntasks-per-gpu": _GPUS,
    "cpus-per-task": "resources.cpus_per_proc (CPUs per rank; --cpus-per-task = ranks x this)",
    "cpus-per-gpu": "resources.cpus_per_proc (CPUs per rank; one rank per GPU)",
    "gpus": _GPUS, "gpus-per-node": _GPUS, "gres": _GPUS, "gpus-per-task": _GPUS,
    "gpus-per-socket": _GPUS, "gpu-bind": _GPUS, "tres-per-task": _GPUS,
    "mem": "resources.mem", "mem-per-cpu": "resources.mem_per_cpu",
    "time": "resources.time", "partition": "resources.partition",
    "account": "resources.account", "qos": "resources.qos", "constraint": "resources.constraint",
    "exclusive": "resources.exclusive",
    "job-name": "name",
    "output": "nothing: hpctrain writes the job's output into the run directory (`hpctrain logs RUN`)",
    "error": "nothing: hpctrain writes the job's output into the run directory (`hpctrain logs RUN`)",
    "open-mode": "nothing: hpctrain appends, so that a requeued run keeps its first run's output",
    "input": "nothing: a batch job reads no input",
    "signal": "preemption.signal and preemption.lead_time",
    "requeue": "preemption.requeue", "no-requeue": "preemption.requeue (false)",
    "array": "sweep (one job array for all of its tasks)",
    "dependency": "after (e.g. after: RUN or afterany:RUN; `--after RUN` on the command line)",
    "chdir": "nothing: the job runs in the directory it was submitted from (cd there first)",
    "export": "env (values for every rank) and secrets (names passed from your environment)",
    "export-file": "env (values for every rank) and secrets (names passed from your environment)",
    "clusters": ("nothing: hpctrain follows the job on this cluster's controller; submit from "
                 "a login node of the other cluster"),
    "wrap": "script and args", "parsable": "nothing: hpctrain reads sbatch's answer itself",
    "wait": "`hpctrain submit --wait`", "test-only": "`hpctrain submit --dry-run`",
    "batch": "nothing: the batch script runs on the first node of the allocation",
}

_NAME = re.compile(r"(--)?[A-Za-z][A-Za-z0-9_-]*")
# What a directive line can carry as a value: printable ASCII; sbatch reads `"` itself.
_VALUE = re.compile(r"[ -~]+")
_BAD_IN_VALUE = re.compile(r'["\\]')
MAX_VALUE = 1024


def normalize(name: str) -> str:
    """The option as sbatch spells it: mail_type -> mail-type."""
    return name.replace("_", "-")


def option_values(options: dict) -> list[tuple[str, str | None]]:
    """A job's `sbatch:` mapping -> directive-table entries, in the job's order. Flags (true)
    have no value; false and null leave the option out. Validated by check() at load."""
    out: list[tuple[str, str | None]] = []
    for key, value in options.items():
        if value is None or value is False:
            continue
        name = normalize(key)
        if value is True:
            out.append((name, None))
        elif isinstance(value, list):
            out.append((name, ",".join(str(v) for v in value)))
        else:
            out.append((name, str(value)))
    return out


def check(options: dict, site, where, site_where) -> list[str]:
    """Every `sbatch:` entry of a job on its site: refused with the key to use instead, or
    passed; returns warnings (an option this list does not know)."""
    warnings: list[str] = []
    forbidden = {normalize(n) for n in site.sbatch_forbid}
    skipped = {normalize(n) for n in site.sbatch_skip}
    seen: dict[str, str] = {}
    for key, value in options.items():
        at = where(("sbatch", key))
        if not isinstance(key, str) or not _NAME.fullmatch(key):
            raise HpctrainError(f"'sbatch' has the key {key!r}, which is not a scheduler option "
                                "name", at, "write the long option without dashes: "
                                "reservation, mail-type, exclude, ...")
        name = normalize(key.lstrip("-"))
        if name in seen:
            raise HpctrainError(f"'sbatch' names --{name} twice ({seen[name]!r} and {key!r})",
                                at, f"keep one {name}")
        seen[name] = key
        if len(name) == 1:
            long = SHORT.get(name)
            raise HpctrainError(f"'sbatch.{key}' is a short option", at,
                                f"give its long name: {long}" if long else
                                "give the option's long name, as `sbatch --help` lists it")
        if name in OWNED:
            raise HpctrainError(f"'sbatch.{key}': hpctrain sets --{name} itself", at,
                                f"use {OWNED[name]}")
        # sbatch takes an unambiguous abbreviation of a long option as the option itself
        # (getopt_long): a prefix of one hpctrain owns is refused as the option is.
        owned = sorted(o for o in OWNED if o.startswith(name)) if name not in KNOWN else []
        if owned:
            raise HpctrainError(f"'sbatch.{key}': sbatch reads --{name} as an abbreviation of "
                                f"--{owned[0]}" + (f" (or {', '.join('--' + o for o in owned[1:])})"
                                                   if len(owned) > 1 else "")
                                + ", which hpctrain sets itself", at, f"use {OWNED[owned[0]]}")
        banned = sorted(o for o in forbidden | skipped if o.startswith(name) and o != name) \
            if name not in KNOWN else []
        if banned:
            raise HpctrainError(f"'sbatch.{key}': sbatch reads --{name} as an abbreviation of "
                                f"--{banned[0]}, which site '{site.name}' does not allow", at,
                                "remove it, or ask whoever keeps the site profile")
        if name in forbidden:
            raise HpctrainError(f"'sbatch.{key}': site '{site.name}' does not allow jobs to set "
                                f"--{name}", at, "remove it (the site profile's sbatch_forbid "
                                f"lists it: {site_where(('sbatch_forbid',))})")
        if name in skipped:
            raise HpctrainError(f"'sbatch.{key}': site '{site.name}' rejects --{name} "
                                "(its sbatch_skip leaves it out of every job)", at,
                                "remove it, or ask whoever keeps the site profile")
        _check_value(name, key, value, at)
        _check_as_written(key, value, at, where)
        if name not in KNOWN:
            close = nearest(name, KNOWN)
            warnings.append(f"{at}: sbatch option --{name} is not one hpctrain knows "
                            + (f"(did you mean --{close}?); " if close else "; ")
                            + "it is passed to sbatch as written")
    return warnings


def _check_value(name: str, key: str, value, at: str) -> None:
    items = value if isinstance(value, list) else [value]
    if isinstance(value, list) and not value:
        raise HpctrainError(f"'sbatch.{key}' is an empty list", at,
                            "give values (mail-type: [END, FAIL]) or remove it")
    for item in items:
        if isinstance(item, bool) or item is None:
            if isinstance(value, list):
                raise HpctrainError(f"'sbatch.{key}' lists {item!r}", at,
                                    "a list holds values to join with commas: [END, FAIL]")
            continue  # a flag (true) or left out (false/null)
        text = str(item)
        if not text.strip() or not _VALUE.fullmatch(text) or _BAD_IN_VALUE.search(text) \
                or len(text) > MAX_VALUE:
            raise HpctrainError(f"'sbatch.{key}' is {text[:80]!r}, which a scheduler directive "
                                "cannot carry", at,
                                f"give --{name} a value of printable ASCII characters without "
                                "quotes or backslashes (spaces are quoted for you)")


_CANONICAL_BOOL = {"true", "false", "True", "False", "TRUE", "FALSE"}


def _check_as_written(key: str, value, at: str, where) -> None:
    """A value reaches sbatch as the user wrote it, or is refused: YAML 1.1 reads unquoted
    `yes`/`on`/`off` as booleans and `010`, `0x1f`, `1_000`, `1e3` as numbers whose text
    differs from what was written (base-60 `30:00` is refused at load, schema/yamlfile.py)."""
    raw = {}
    for doc, prefix in ((getattr(where, "job", None), ("sbatch", key)),
                        (getattr(where, "site_doc", None), ("defaults", "sbatch", key))):
        for path, text in (getattr(doc, "raw", None) or {}).items():
            if path[:len(prefix)] == prefix and len(path) <= len(prefix) + 1:
                raw.setdefault(path[len(prefix):], text)
    items = [((i,), v) for i, v in enumerate(value)] if isinstance(value, list) else [((), value)]
    for sub, item in items:
        text = raw.get(sub)
        if text is None:
            continue
        if isinstance(item, bool):
            changed = text not in _CANONICAL_BOOL
            meant = "true" if item else "false"
        elif isinstance(item, (int, float)):
            changed = text != str(item)
            meant = str(item)
        else:
            continue
        if changed:
            shown = f"{key}[{sub[0]}]" if sub else key
            raise HpctrainError(f"'sbatch.{shown}' is {text} unquoted, which YAML reads as "
                                f"{meant}, not the text you wrote", at,
                                f"quote it (\"{text}\") to pass it as written"
                                + ("" if sub or not isinstance(item, bool) else
                                   ", or write true/false for a flag"))


def check_site(site, where) -> None:
    """A site's sbatch_forbid: option names."""
    for i, name in enumerate(site.sbatch_forbid):
        if not _NAME.fullmatch(name.lstrip("-")):
            raise HpctrainError(f"sbatch_forbid entry {name!r} is not an option name",
                                where(("sbatch_forbid", i)), "e.g. sbatch_forbid: [mail-user]")


__all__ = ["KNOWN", "OWNED", "SHORT", "check", "check_site", "normalize", "option_values"]
