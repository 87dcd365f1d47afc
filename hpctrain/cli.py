"""The command line. Thin: parse, call the API, print. Exit 0 ok, 2 user error, 1 internal."""
from __future__ import annotations

import argparse
import sys

from .errors import HpctrainError


def _job_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("job", help="the job file (job.yaml)")
    p.add_argument("--site", help="site profile name or file (wins over the job's own 'site')")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                   help="override a job value, e.g. --set resources.nodes=4 (repeatable)")


def _load(args):
    from .loading import load_job
    job = load_job(args.job, site=args.site, overrides=args.overrides)
    for w in job.warnings:
        print(f"warning: {w}", file=sys.stderr)
    return job


def cmd_render(args) -> int:
    from .api import prepare
    prep = prepare(_load(args), run_id="RUN_ID")
    for w in prep.plan.warnings[len(prep.job.warnings):]:
        print(f"warning: {w}", file=sys.stderr)
    sys.stdout.write(prep.script)
    return 0


def cmd_validate(args) -> int:
    from .api import prepare
    prep = prepare(_load(args), run_id="RUN_ID")
    p, spec = prep.plan, prep.job.spec
    head = {"nodename": "first node of the allocation",
            "suffix": f"first node + '{p.head_suffix}'",
            "interface": f"first node's IPv4 on {p.head_interface}"}[p.head_mode]
    port = (str(p.port_fixed) if p.port_fixed else
            f"{p.port_base} + 2*(job id % {p.port_slots})")
    launch = ("torchrun --standalone (one node)" if p.nnodes == 1 else
              f"srun 1 task/node -> torchrun c10d, rendezvous {head}:{port}")
    rows = [
        ("job", f"{spec.name}  ({prep.job.source})"),
        ("site", f"{p.site}  (scheduler {p.scheduler})"),
        ("library", spec.library),
        ("ranks", f"{p.nnodes} node(s) x {p.nproc_per_node} = {p.nnodes * p.nproc_per_node}"),
        ("resources", " ".join(d for d in p.directives if not d.startswith(("--output", "--open-mode", "--job-name")))),
        ("launcher", launch),
        ("rdzv-conf", p.rdzv_conf if p.nnodes > 1 else "-"),
        ("program", " ".join(p.python + ["<bootstrap> --"] + p.program)),
        ("cpu mode", p.bootstrap["cpu_mode"]),
    ]
    for w in p.warnings:
        rows.append(("warning", w))
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:>{width}}  {v}")
    print("ok: the job is valid")
    return 0


def cmd_submit(args) -> int:
    import shlex
    from .api import prepare, submit_prepared
    prep = prepare(_load(args))
    if args.dry_run:
        print(f"# would run: {shlex.join(prep.submit_command)}")
        print(f"# run directory: {prep.run_dir}")
        sys.stdout.write(prep.script)
        return 0
    run = submit_prepared(prep)
    rec = run.record
    print(f"submitted {rec['name']}  run {run.id}  job {rec['job_id']}  on {rec['site']}")
    print(f"run directory: {run.path}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from . import __version__
    parser = argparse.ArgumentParser(
        prog="hpctrain", description="Multi-GPU, multi-node RL training on Slurm from one job.yaml.")
    parser.add_argument("--version", action="version", version=f"hpctrain {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("render", help="print the job script that would be submitted")
    _job_args(p)
    p.set_defaults(func=cmd_render)

    p = sub.add_parser("validate", help="check a job and summarise its launch")
    _job_args(p)
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("submit", help="create a run directory and submit the job")
    _job_args(p)
    p.add_argument("--dry-run", action="store_true", help="print what would be submitted; submit nothing")
    p.set_defaults(func=cmd_submit)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except HpctrainError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
