"""The command line. Thin: parse, call the same functions as the Python API, print.

Exit 0 ok, 2 a user error (printed as `error: …` with the fix), 130 interrupted.
"""
from __future__ import annotations

import argparse
import sys

from .errors import HpctrainError


def _job_args(p: argparse.ArgumentParser, optional: bool = False) -> None:
    p.add_argument("job", nargs="?" if optional else None, help="the job file (job.yaml)")
    p.add_argument("--site", help="site profile name or file (wins over the job's own 'site')")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                   help="override a job value, e.g. --set resources.nodes=4 (repeatable)")
    p.add_argument("--after", action="append", metavar="RUN",
                   help="start only after this run ended: RUN (it succeeded), afterany:RUN, "
                   "afternotok:RUN; a run id, directory or job id (repeatable; replaces the "
                   "job's own 'after')")


def _load(args, show_warnings: bool = True):
    from .job.load import load_job
    job = load_job(args.job, site=args.site, overrides=args.overrides, after=args.after)
    if show_warnings:
        for w in job.warnings:
            print(f"warning: {w}", file=sys.stderr)
    return job


def cmd_render(args) -> int:
    from .submission import prepare
    prep = prepare(_load(args), run_id="RUN_ID")
    sys.stdout.write(prep.script)
    return 0


def _study_trials(overrides: list[str]) -> tuple[int | None, list[str]]:
    """`submit --resume STUDY --set search.n_trials=N`: N, and the other overrides."""
    n, rest = None, []
    for text in overrides:
        key, sep, value = text.partition("=")
        if key.strip() == "search.n_trials" and sep:
            if not value.strip().isdigit():
                raise HpctrainError(f"--set {text}: n_trials is a whole number",
                                    f"--set {text}", "e.g. --set search.n_trials=40")
            n = int(value)
        else:
            rest.append(text)
    return n, rest


def cmd_validate(args) -> int:
    from .job import video
    from .job.checks import check_secrets
    from .submission import prepare
    job = _load(args, show_warnings=False)  # shown in the summary below, once each
    check_secrets(job)
    rendering = video.check(job)  # before queueing: a video job only where its GPUs can render
    prep = prepare(job, run_id="RUN_ID")
    from .backends import backend_class
    p, spec = prep.plan, prep.job.spec
    scheduler = backend_class(p.backend)
    head = {"nodename": "first node chosen for the attempt" if p.spare_nodes else scheduler.head_node,
            "suffix": f"first node + '{p.head_suffix}'",
            "interface": f"first node's IPv4 on {p.head_interface}"}[p.head_mode]
    port = (str(p.port_fixed) if p.port_fixed else
            f"{p.port_base} + 2*(job id % {p.port_slots})")
    launch = ("torchrun --standalone (one node)" if p.nnodes == 1 else
              f"{scheduler.step_launcher} -> torchrun c10d, rendezvous {head}:{port}")
    rows = [
        ("job", f"{spec.name}  ({prep.job.source})"),
        ("site", f"{p.site}  (scheduler {p.backend})"),
        ("library", spec.library),
        ("ranks", f"{p.nnodes} node(s) x {p.nproc_per_node} = {p.nnodes * p.nproc_per_node}"),
        ("resources", " ".join(f"--{k}" + ("" if v is None else f"={v}") for k, v in p.directives
                               if k not in ("output", "open-mode", "job-name"))),
        ("launcher", launch),
        ("rdzv-conf", p.rdzv_conf if p.nnodes > 1 else "-"),
        ("program", " ".join(p.python + ["<bootstrap> --"] + p.program)),
        ("cpu mode", p.bootstrap["cpu_mode"]),
        ("tasks", f"{len(prep.tasks)}, {prep.parallel} at a time" if prep.tasks else "-"),
    ]
    if spec.isaaclab_version:
        from .job.isaaclab import describe_release
        rows.insert(3, ("isaac lab", describe_release(spec)))
    if spec.resources.spare_nodes:
        from .job.checks import spare_cost
        rows.insert(4, ("spares", spare_cost(spec)))
    if spec.search is not None:
        from .job.search import shape
        rows.append(("study", shape(spec).removeprefix("study: ")))
    if rendering:
        rows.append(("video", rendering))
    for dep in prep.job.after:
        rows.append(("after", f"{dep['mode']} run {dep['run_id']} (job {dep['job_id']})"))
    for w in p.warnings:
        rows.append(("warning", w))
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:>{width}}  {v}")
    print("ok: the job is valid")
    return 0


def cmd_submit(args) -> int:
    import shlex
    from .job.checks import check_secrets
    from .submission import prepare, resume, submit_prepared
    if args.resume is not None:
        n_trials, overrides = _study_trials(args.overrides or [])
        if args.job is not None or overrides or args.site or args.dry_run or args.notify:
            raise HpctrainError("--resume RUN starts that run's own job again: no job file, "
                                "--site, --set (but a study's search.n_trials=N), --dry-run or "
                                "--notify with it", fix="hpctrain submit --resume RUN")
        run, nodes, why = resume(args.resume, n_trials)
        rec = run.record
        from .rank.printable import shown  # `why` quotes the run's failure records
        print(shown(f"resumed {rec.name}  run {run.id}  job {rec.job_id}  on {rec.site}"
                    + (f"  without {','.join(nodes)} ({why})" if nodes else "")))
        print(f"run directory: {run.path}", flush=True)
        return _wait(args, run)
    if args.job is None:
        raise HpctrainError("submit needs a job file (or --resume RUN)",
                            fix="hpctrain submit job.yaml")
    job = _load(args)
    check_secrets(job)
    notify = _notify_settings(args, job)
    if notify is not None:
        # This machine sends the events while it waits: the job does not (never both).
        import msgspec
        job = msgspec.structs.replace(job, notify_from_job=False)
    elif job.spec.notify is not None and not _env_set(job.spec.notify.url_from):
        print(f"warning: notify: ${job.spec.notify.url_from} (notify.url_from) is not set here: "
              "the job's events will not be sent (each attempt is recorded in its "
              "status/notify.jsonl); export it before submitting", file=sys.stderr)
    elif job.spec.notify is not None and (problem := _url_problem(job.spec.notify.url_from)):
        print(f"warning: notify: ${job.spec.notify.url_from} (notify.url_from): the URL {problem}; "
              "the job's events will not be sent", file=sys.stderr)
    prep = prepare(job)
    from .submission import collisions, test_start
    warned = collisions(prep)  # a job that can never start is refused here, dry run or not
    for w in warned:
        print(f"warning: {w}", file=sys.stderr)
    if args.dry_run:
        print(f"# would run: {shlex.join(prep.submit_command)}")
        start = test_start(prep)
        if start:
            print(f"# {start}")
        print(f"# run directory: {prep.run_dir}"
              + (f" (on {prep.transport.login}; mirrored here in {prep.mirror})" if prep.mirror else ""))
        if prep.tasks:
            print(f"# sweep: {len(prep.tasks)} tasks, {prep.parallel} at a time, each in tasks/<i>/")
            for task in prep.job.tasks:
                print(f"#   {task.index:>3}  " + "  ".join(f"{k}={v}" for k, v in task.values.items()))
        sys.stdout.write(prep.script)
        return 0
    run = submit_prepared(prep, warned=warned)
    rec = run.record
    print(f"submitted {rec.name}  run {run.id}  job {rec.job_id}  on {rec.site}"
          + (f"  ({rec.array_size} tasks)" if rec.array_size else ""))
    print(f"run directory: {run.path}")
    from .follow.display import remote_lines
    for line in remote_lines(rec):
        print(line)
    sys.stdout.flush()
    return _wait(args, run, notify)


def _submit_derived(prep, dry_run: bool, say=sys.stdout):
    """Submit a job derived from a run (eval, export): its script with --dry-run (None), else
    its run, after collisions' warnings (a job that can never start is refused there)."""
    import shlex
    from .submission import collisions, submit_prepared
    if dry_run:
        print(f"# would run: {shlex.join(prep.submit_command)}")
        print(f"# run directory: {prep.run_dir}")
        sys.stdout.write(prep.script)
        return None
    warned = collisions(prep)
    for w in warned:
        print(f"warning: {w}", file=sys.stderr)
    erun = submit_prepared(prep, warned=warned)
    rec = erun.record
    print(f"submitted {rec.name}  run {erun.id}  job {rec.job_id}  on {rec.site}"
          + (f"  ({rec.array_size} tasks)" if rec.array_size else ""), file=say)
    return erun


def cmd_eval(args) -> int:
    from .follow.operate import resolve
    from .job.evaluate import plan
    from .submission import prepare_derived
    ev = plan(resolve(args.run), args.checkpoint, args.every, args.episodes, args.steps,
              args.time)
    for why in ev.skipped:
        print(f"warning: checkpoint {why}: not evaluated", file=sys.stderr)
    prep = prepare_derived(ev.job, ev.run_id, ev.source.run.path, "evaluation")
    run = ev.source.run
    print(f"evaluating run {run.id}: {len(ev.chosen)} checkpoint(s), {ev.rule}")
    for i, c in enumerate(ev.chosen):
        if len(ev.chosen) > 15 and 10 <= i < len(ev.chosen) - 5:
            if i == 10:
                print(f"  ... {len(ev.chosen) - 15} more")
            continue
        print(f"  {c.path}" + (f"  (iteration {c.iteration})" if c.iteration is not None else ""))
    erun = _submit_derived(prep, args.dry_run)
    if erun is None:
        return 0
    print(f"run directory: {erun.path}")
    print(f"results: {run.path / 'eval'} (hpctrain status {run.id})", flush=True)
    code = _wait(args, erun)
    if args.wait:
        from .follow.display import evaluation_lines
        from .runs.evaluations import as_json, read
        evals, problems = read(run.path)
        for line in evaluation_lines(as_json(evals), problems):
            print(line)
    return code


def _env_set(name: str) -> bool:
    import os
    return bool(os.environ.get(name))


def _url_problem(name: str) -> str | None:
    """What is wrong with the webhook URL in $name, in words that quote none of it."""
    import os
    from .rank.end.notify import BadURL, check_url
    try:
        check_url(os.environ.get(name, ""))
    except BadURL as exc:
        return str(exc)
    return None


def _notify_settings(args, job) -> dict | None:
    """`--notify`: the job's notify: section (or its site's defaults), its URL's variable set."""
    if not getattr(args, "notify", False):
        return None
    import os
    import msgspec
    if not args.wait or args.dry_run:
        raise HpctrainError("--notify sends the run's events while `submit --wait` follows it",
                            fix="hpctrain submit JOB --wait --notify")
    if job.spec.notify is None:
        raise HpctrainError("--notify: the job has no notify: section", job.source,
                            "add notify: {url_from: VAR, format: ntfy|slack|discord|json} to "
                            "the job (or to the site's defaults)")
    settings = msgspec.to_builtins(job.spec.notify)
    if not os.environ.get(settings["url_from"]):
        raise HpctrainError(f"--notify: ${settings['url_from']} (notify.url_from) is not set "
                            "here", job.source, f"export {settings['url_from']}=https://... "
                            "(its value is never written to disk)")
    problem = _url_problem(settings["url_from"])
    if problem:
        raise HpctrainError(f"--notify: ${settings['url_from']} (notify.url_from): the URL "
                            f"{problem}", job.source, "set it to the webhook's http(s) URL, as "
                            "the service gives it")
    return settings


def _wait(args, run, notify: dict | None = None) -> int:
    if not args.wait:
        return 0
    import shutil
    from .follow.display import WaitPrinter
    from .follow.status import exit_status, wait
    printer = WaitPrinter(sys.stdout.isatty(), _write, ranks=args.ranks,
                          columns=shutil.get_terminal_size().columns)
    if notify is not None:
        from .follow.notify import Notifier
        notifier, show = Notifier(notify, str(run.path)), printer

        def printer(st):  # noqa: F811 (the printer, and the notifier after it)
            show(st)
            notifier(st)
        printer.close = show.close
    try:
        st = wait(run, on_tick=printer)
    except KeyboardInterrupt:
        # The live line has no newline yet: end it, so that "interrupted" (main) and whatever the
        # shell prints next start on lines of their own.
        printer.close()
        sys.stdout.flush()
        print(f"stopped waiting; the run goes on: hpctrain status {run.id}", file=sys.stderr)
        raise
    printer.close()
    from .rank.printable import shown
    for f in st.failures:
        print(shown(f"failed: rank {f['rank']} on {f['node']} exit {f['exit_status']}: {f['error']}"))
    return exit_status(st)


def cmd_shell(args) -> int:
    from .interactive import shell
    return shell(_load(args))


def cmd_launch(args) -> int:
    from .interactive import launch
    launch(args.run)
    return 0


def cmd_attach(args) -> int:
    from .follow.attach import attach, stacks
    if args.stacks:
        if args.node is not None or args.rank is not None:
            raise HpctrainError("--stacks prints every rank's stack: no --node or --rank with it",
                                fix=f"hpctrain attach {args.run} --stacks")
        for line in stacks(args.run):
            print(line, flush=True)
        return 0
    attach(args.run, node=args.node, rank=args.rank)
    return 0


def cmd_site_detect(args) -> int:
    import shlex
    from pathlib import Path
    from .backends.slurm.detect import detect
    from .job.sites import load_file, search_dirs
    import os
    import re
    from .errors import HpctrainError
    if not re.fullmatch(r"(?!\.\.?\Z)[A-Za-z0-9_.-]{1,100}", args.name):
        raise HpctrainError(f"site name {args.name!r} is not a valid name",
                            fix="letters, digits, '_', '.', '-' (it becomes NAME.yaml)")
    out = Path(args.out) if args.out else search_dirs()[-2] / f"{args.name}.yaml"
    if out.exists() and not args.force:
        raise HpctrainError(f"{out} exists", fix="--force to replace it, or --out FILE")
    # The probe's files live where runs do: on the file system the nodes share.
    work = Path(os.environ.get("HPCTRAIN_RUNS_DIR") or "runs").resolve() / ".site-detect" / args.name
    if not args.no_probe:
        print("site detect: asking scontrol and sinfo, and one 2-node probe job ...", flush=True)
    _, todo = detect(args.name, out, args.partition, args.nodelist,
                     shlex.split(args.python) if args.python else None, not args.no_probe, work)
    load_file(out)  # the profile it wrote loads as every site does
    print(f"wrote {out} (valid); each key says why in a comment above it")
    for t in todo:
        print(f"  TODO: {t}")
    print(f"next: hpctrain doctor --site {out if args.out else args.name}")
    return 0


def cmd_doctor(args) -> int:
    from .doctor import run
    from .rank.printable import shown  # what the nodes and their tools said
    report = run(args.job, args.site, args.overrides, timeout=args.timeout,
                 say=lambda text: print(shown(text), flush=True))
    print(shown(report.text()))
    return 0 if report.ok else 1


def _write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def _study(ref):
    """The run `ref` names, and whether it is a study (search/: its journal says more)."""
    from .follow.operate import resolve
    from .search.follow import is_study
    run = resolve(ref)
    return run, is_study(run)


def cmd_status(args) -> int:
    import json
    from .follow.display import describe, format_status
    from .follow.operate import status
    if args.run:
        run, study = _study(args.run)
        st = status(run)
        if study:
            from .search import methods
            from .search.show import as_json
            method = methods.of(run)
            found = method.status(run)
            print(json.dumps({"run": st.to_json(), method.kind: json.loads(as_json(found))},
                             indent=2)
                  if args.json else method.format_status(found, workers=describe(st.state)))
            return 0
        print(json.dumps(st.to_json(), indent=2) if args.json else format_status(st, ranks=args.ranks))
        return 0
    return cmd_list(args)


def _study_notes(rows) -> dict:
    """run path -> (the study's one-line summary, what it was made from, its method's kind:
    "study" or "population") for the rows that are studies; a study whose state cannot be read
    says why in its own row, the other rows are shown as ever."""
    from pathlib import Path
    from .runs.records import Run
    from .search import follow, methods
    notes = {}
    budget = [follow.LIST_BYTES]  # journals' bytes the whole table may read (follow.listed)
    for r in rows:
        run = Run(Path(r.path))
        if not follow.is_study(run):
            continue
        method = methods.of(run)
        try:
            notes[r.path] = (*method.listed(run, budget), method.kind)
        except HpctrainError as exc:  # this run's row says why; the others are shown as ever
            notes[r.path] = (f"study: {exc.what}", None, method.kind)
    return notes


def cmd_list(args) -> int:
    import json
    from .follow.display import format_table
    from .follow.status import recent
    rows = recent(limit=args.limit)
    notes = _study_notes(rows)
    if args.json:
        from .search.show import as_json
        out = []
        for r in rows:
            d = r.to_json()
            if r.path in notes:
                text, found, key = notes[r.path]
                d[key] = json.loads(as_json(found)) if found else {"error": text}
            out.append(d)
        print(json.dumps(out, indent=2))
    elif not rows:
        print("no runs yet: `hpctrain submit job.yaml` starts one")
    else:
        print(format_table(rows, {path: text for path, (text, _, _) in notes.items()}))
    return 0


def cmd_logs(args) -> int:
    from .follow.operate import logs
    if args.trial is not None:
        if args.task is not None:
            raise HpctrainError("--trial names a study's trial, --task a sweep's task: not both",
                                fix=f"hpctrain logs {args.run} --trial N")
        run, study = _study(args.run)
        if not study:
            raise HpctrainError(f"run {run.id} is not a study: it has no trials",
                                fix=f"hpctrain logs {args.run} (or --task N for a sweep's task)")
        logs(run, follow_output=args.follow, rank=args.rank, node=args.node, trial=args.trial)
        return 0
    logs(args.run, follow_output=args.follow, rank=args.rank, node=args.node, task=args.task)
    return 0


def cmd_cancel(args) -> int:
    from .follow.display import describe
    from .follow.operate import cancel
    st = cancel(args.run)
    print(f"{st.run_id}  job {st.job}: {describe(st.state)}")
    return 0


def cmd_plot(args) -> int:
    from .follow.plot import plot
    from .follow.display import plot_summary
    run, study = _study(args.run)
    if study:
        if args.eval:
            raise HpctrainError("a study is evaluated trial by trial: --eval draws one run's",
                                fix="hpctrain plot RUN_DIR/trials/<n> --eval")
        if args.metric:
            raise HpctrainError("a study's plot draws the metric its trials report to the pruner: "
                                "no --metric", fix=f"hpctrain plot {args.run} (a trial's own "
                                "curves: hpctrain tensorboard on its directory)")
        from .rank.printable import shown
        from .search import methods
        print(shown(methods.of(run).plot(run, args.out)))
        return 0
    if args.eval:
        from .follow.plot import plot_evaluation
        print(plot_summary(plot_evaluation(run, args.metric, args.out)))
        return 0
    print(plot_summary(plot(run, args.metric, args.out)))
    return 0


def cmd_report(args) -> int:
    from .follow.report import as_json, report, text
    run, study = _study(args.run)
    if study:
        from .search import methods, show
        if args.out is not None:
            raise HpctrainError("a study's report is text (or --json): no --out",
                                fix=f"hpctrain report {args.run}; its figure: hpctrain plot {args.run}")
        method = methods.of(run)
        result = method.report(run)
        print(show.as_json(result) if args.json else method.format_report(result))
        return 0
    result = report(run, args.out)
    print(as_json(result) if args.json else text(result))
    return 0


def cmd_export(args) -> int:
    import json
    from .follow import export
    chosen = export.choose(args.run, args.checkpoint, args.samples)
    if export.in_process(chosen.run):
        if args.dry_run or args.time:
            raise HpctrainError(f"run {chosen.run.id}'s export runs here, as a child of this "
                                "command, not as a job: --dry-run and --time are for a job",
                                fix=f"hpctrain export {chosen.run.id}")
        record = export.export_here(chosen)
    else:
        record = _export_job(args, chosen)
        if record is None:
            return 0
    print(json.dumps(record, indent=2, sort_keys=True) if args.json else export.text(record))
    return 0


def _export_job(args, chosen) -> dict | None:
    """The export as a job derived from the run; with --wait its record (or its error)."""
    import contextlib
    from .follow import export
    from .job.export import plan
    from .submission import prepare_derived
    ex = plan(chosen, args.time)
    prep = prepare_derived(ex.job, ex.run_id, chosen.run.path, "export")
    say = sys.stderr if args.json else sys.stdout
    print(f"exporting {chosen.checkpoint} of run {chosen.run.id} ({chosen.rule}) in a job on "
          f"{ex.job.site.name}", file=say)
    erun = _submit_derived(prep, args.dry_run, say)
    if erun is None:
        return None
    rec = erun.record
    print(f"results: {chosen.run.path / 'exports' / chosen.name} (hpctrain status {erun.id})",
          file=say, flush=True)
    if not args.wait:
        return None
    args.ranks = False
    with contextlib.redirect_stdout(sys.stderr if args.json else sys.stdout):  # --json: the record alone
        code = _wait(args, erun)
    result = export.job_result(erun)
    if result is not None and "error" in result:
        raise export.failed(chosen, result)
    if code != 0 or result is None:
        raise HpctrainError(f"export job {rec.job_id} (run {erun.id}) ended with status {code} "
                            "and no export record", fix=f"its output: hpctrain logs {erun.id}")
    return export.read_export(chosen.run, chosen.name)


def cmd_pull(args) -> int:
    from pathlib import Path
    from .follow import pull
    kinds = list(pull.KINDS)
    if args.only:
        kinds = [k.strip() for k in args.only.split(",") if k.strip()]
        wrong = [k for k in kinds if k not in pull.KINDS]
        if wrong or not kinds:
            raise HpctrainError(f"--only {args.only!r} names no kind pull knows"
                                + (f" ({', '.join(wrong)})" if wrong else ""),
                                fix="a comma list of " + ", ".join(pull.KINDS))
    limit = pull.parse_size(args.max_size) if args.max_size else pull.DEFAULT_MAX
    bwlimit = pull.parse_size(args.bwlimit, "--bwlimit") if args.bwlimit else None
    run, study = _study(args.run)
    scope, also = "", []
    if args.best:
        if not study:
            raise HpctrainError(f"--best is for a study or a population; {run.id} is a run",
                                fix=f"hpctrain pull {run.id} (without --best)")
        from .search import methods
        pull.fetch_study_records(run)
        scope, also, which = methods.of(run).best_files(run)
        print(f"best: {which}")
    dest = Path(args.to) if args.to else Path("pulled") / run.id
    print(pull.format_pulled(pull.pull(run, dest, kinds, args.checkpoint, limit,
                                       args.overwrite, scope, tuple(also), bwlimit)))
    return 0


def cmd_tensorboard(args) -> int:
    import time
    from .follow.board import start
    from .follow.display import board_text
    from .follow.operate import resolve
    run = resolve(args.run)
    board, _server = start(run, args.port)
    print(board_text(board, run.id), flush=True)
    try:
        while True:  # TensorBoard serves from its own threads until Ctrl-C
            time.sleep(3600)
    except KeyboardInterrupt:
        print("TensorBoard stopped")
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
    _job_args(p, optional=True)
    p.add_argument("--resume", metavar="RUN",
                   help="start a run that ended (time limit, requeue cap, failure) again, in its "
                   "own run directory, from its newest checkpoint, leaving out the nodes its "
                   "failures blamed")
    p.add_argument("--dry-run", action="store_true", help="print what would be submitted; submit nothing")
    p.add_argument("--wait", action="store_true",
                   help="wait for the job to end, showing its state and training progress; "
                   "exit with its exit status")
    p.add_argument("--ranks", action="store_true", help="with --wait: each rank's progress too")
    p.add_argument("--notify", action="store_true",
                   help="with --wait: send the run's events (its notify: section) from this "
                   "machine, for compute nodes that cannot reach the webhook")
    p.set_defaults(func=cmd_submit)

    p = sub.add_parser("shell", help="an interactive allocation with the job's resources and a "
                       "shell on its first node with the job's environment; `hpctrain launch` in "
                       "it runs the job's launch")
    p.add_argument("job", help="the job file (job.yaml)")
    p.add_argument("--site", help="site profile name or file (wins over the job's own 'site')")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                   help="override a job value, e.g. --set resources.nodes=2 (repeatable)")
    p.set_defaults(func=cmd_shell, after=None)

    p = sub.add_parser("launch", help="in `hpctrain shell`: run the job's launch across the "
                       "allocation (one attempt in its run directory each time)")
    p.add_argument("run", nargs="?", help="the shell's run (default: $HPCTRAIN_RUN_DIR, which "
                   "the shell sets)")
    p.set_defaults(func=cmd_launch)

    p = sub.add_parser("attach", help="a shell on a running job's node, beside its ranks; "
                       "--stacks: every rank's Python stack now, the job left running")
    p.add_argument("run", help="run id, run directory or Slurm job id")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--node", help="this node of the job (default: its first)")
    which.add_argument("--rank", type=int, help="the node where this rank runs")
    p.add_argument("--stacks", action="store_true",
                   help="print every rank's Python stack (the hang watcher's dump: SIGQUIT, "
                   "faulthandler) instead of opening a shell")
    p.set_defaults(func=cmd_attach)

    p = sub.add_parser("site", help="site profiles: `site detect NAME` writes one from what the "
                       "cluster says")
    site_sub = p.add_subparsers(dest="site_command", metavar="SUBCOMMAND", required=True)
    d = site_sub.add_parser("detect", help="on a login node: scontrol, sinfo and a 2-node probe "
                            "job -> a commented, validated site profile")
    d.add_argument("name", help="the site's name (the profile is NAME.yaml)")
    d.add_argument("--partition", help="the partition to describe (default: Slurm's default)")
    d.add_argument("--nodelist", help="the two nodes the probe runs on (default: Slurm's choice)")
    d.add_argument("--python", help="the interpreter on the nodes, as a command (default: this one)")
    d.add_argument("--out", help="the file to write (default ~/.config/hpctrain/sites/NAME.yaml)")
    d.add_argument("--force", action="store_true", help="replace an existing profile")
    d.add_argument("--no-probe", action="store_true",
                   help="no probe job: scontrol and sinfo only (head and modules left as TODO)")
    d.set_defaults(func=cmd_site_detect)

    p = sub.add_parser("doctor", help="a short 2-node check with the job's own settings: head "
                       "name, run directory, rendezvous, all-reduce bandwidth, devices; a fix "
                       "for each failure")
    p.add_argument("job", nargs="?", help="the job file (default: a plain job on the site)")
    p.add_argument("--site", help="site profile name or file")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                   help="override a job value (repeatable)")
    p.add_argument("--timeout", type=float, default=900,
                   help="seconds to wait for the check job (default 900)")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("eval", help="evaluate a run's checkpoints: a job on the run's site with its "
                       "code, interpreter and container, one rank, the library's bounded play; "
                       "the results are records in the run")
    p.add_argument("run", help="run id, run directory or Slurm job id")
    p.add_argument("--checkpoint", default="latest", metavar="latest|best|N|all",
                   help="which: the newest (default), the best by evaluation, iteration N, or "
                   "all of them as one job array")
    p.add_argument("--every", type=int, metavar="K", help="with --checkpoint all: every K-th "
                   "checkpoint (and the last)")
    p.add_argument("--episodes", type=int, default=10, help="episodes per checkpoint (Isaac "
                   "Lab: environments played at once; default 10)")
    p.add_argument("--steps", type=int, help="steps played (Isaac Lab; default 1000)")
    p.add_argument("--time", help="each evaluation's time limit, e.g. 00:30:00 (default: the "
                   "run's)")
    p.add_argument("--dry-run", action="store_true", help="print the job script, submit nothing")
    p.add_argument("--wait", action="store_true", help="wait for it and print the results")
    p.add_argument("--ranks", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("status", help="a run's state, training progress, nodes, time and failed "
                       "ranks; a study's trials and best; no RUN: recent runs")
    p.add_argument("run", nargs="?", help="run id, run directory or Slurm job id (1234, 1234_5)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--ranks", action="store_true", help="each rank's progress: node, step, rate, metrics")
    p.add_argument("--limit", type=int, default=20, help="runs in the table (default 20)")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("list", help="recent runs: run id, name, job, state, training progress")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--limit", type=int, default=20, help="how many runs (default 20)")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("logs", help="a run's output: all of it, one rank's or one node's")
    p.add_argument("run", help="run id, run directory or Slurm job id (1234_5: that array task)")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing until the job ends")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--rank", type=int, help="only this rank (logs/rank-N.log)")
    which.add_argument("--node", help="only the ranks that ran on this node")
    p.add_argument("--task", type=int, help="a sweep's task index")
    p.add_argument("--trial", type=int, metavar="N", help="a study's trial (its ranks' logs)")
    p.set_defaults(func=cmd_logs)

    p = sub.add_parser("plot", help="a PNG of a run's training curves (every attempt, every sweep "
                       "task) from its TensorBoard event files; a study's: every trial's curve "
                       "and the best so far")
    p.add_argument("run", help="run id, run directory or Slurm job id")
    p.add_argument("--metric", action="append", default=[], metavar="TAG",
                   help="a metric to draw: its TensorBoard tag, a glob, or part of its name "
                   "(repeatable; default: the library's main metric first, then the others)")
    p.add_argument("--out", help="the PNG to write (default RUN_DIR/plots/curves.png)")
    p.add_argument("--eval", action="store_true", help="the evaluations (`hpctrain eval`) "
                   "against iteration beside the training curve (default "
                   "RUN_DIR/plots/evaluation.png)")
    p.set_defaults(func=cmd_plot)

    p = sub.add_parser("report", help="what a run (or sweep) cost and how well it used its GPUs: "
                       "GPU-hours allocated and used, utilization per GPU and rank, time lost; a "
                       "study's GPU-hours per trial and what pruning saved")
    p.add_argument("run", help="run id, run directory or Slurm job id")
    p.add_argument("--json", action="store_true", help="the report as one JSON object")
    p.add_argument("--out", help="the PNG of utilization over time (default RUN_DIR/plots/usage.png)")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("export", help="a checkpoint's policy as ONNX and TorchScript in "
                       "RUN_DIR/exports/<checkpoint>/, checked against the checkpoint's own "
                       "policy on sampled observations (run under the run's interpreter)")
    p.add_argument("run", help="run id, run directory or Slurm job id")
    p.add_argument("--checkpoint", default="latest", metavar="latest|best|N|PATH",
                   help="which checkpoint: latest (default), best (by `hpctrain eval`), the "
                   "number in its name (iteration, epoch or timestep) or its path in the run "
                   "directory")
    p.add_argument("--samples", type=int, metavar="N",
                   help="sampled observations the check runs (default 64, at most 4096)")
    p.add_argument("--json", action="store_true", help="the export record as one JSON object")
    p.add_argument("--wait", action="store_true", help="a run off this machine or in a "
                   "container is exported by a 1-node job on its site: wait for it and print "
                   "the record (a run of this machine is exported here, always waited for)")
    p.add_argument("--time", help="the export job's time limit (default: the run's, at most "
                   "00:30:00)")
    p.add_argument("--dry-run", action="store_true", help="print the export job's script, "
                   "submit nothing")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("pull", help="copy a run's artifacts (exported policies, evaluations, "
                       "videos, a checkpoint, TensorBoard events, logs) here, from its cluster "
                       "or this machine, with a manifest; resumes a cut copy")
    p.add_argument("run", help="run id, run directory or Slurm job id; a study with --best")
    p.add_argument("--to", metavar="DIR", help="the folder to copy into (default pulled/RUN_ID)")
    p.add_argument("--only", metavar="KINDS",
                   help="a comma list of exports, eval, videos, checkpoint, tensorboard, logs "
                   "(default: all of them)")
    p.add_argument("--checkpoint", default="newest", metavar="WHICH",
                   help="newest (default), best (by `hpctrain eval`), all, none, or a "
                   "checkpoint's file name")
    p.add_argument("--max-size", metavar="SIZE",
                   help="refuse a selection larger than this, e.g. 500M, 20G (default 20G)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace files in DIR that differ from the run's and that pull did not "
                   "write there (by default they are refused)")
    p.add_argument("--bwlimit", metavar="RATE",
                   help="at most this many bytes a second, e.g. 50M (default: as fast as it goes)")
    p.add_argument("--best", action="store_true",
                   help="a study's best trial, or a population's best member with its checkpoint")
    p.set_defaults(func=cmd_pull)

    p = sub.add_parser("tensorboard", help="start TensorBoard on a run or sweep (every attempt, "
                       "every task) and print the ssh line that reaches it from a laptop")
    p.add_argument("run", help="run id, run directory or Slurm job id")
    p.add_argument("--port", type=int, help="port on 127.0.0.1 (default: 6006 or the next free one)")
    p.set_defaults(func=cmd_tensorboard)

    p = sub.add_parser("cancel", help="cancel a run (every task of a sweep)")
    p.add_argument("run", help="run id, run directory or Slurm job id")
    p.set_defaults(func=cmd_cancel)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except HpctrainError as exc:
        from .rank.printable import shown  # a message may quote a file's or a tool's text
        print(shown(f"error: {exc}"), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except OSError as exc:  # the file system said no where no check foresaw it
        where = f" ({exc.filename})" if exc.filename else ""
        print(f"error: {exc.strerror or exc}{where}\n  fix: check that path: it must exist, be "
              "readable, and (for runs and the index) writable", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 — never a traceback for the user; one on request
        import os
        if os.environ.get("HPCTRAIN_DEBUG"):
            raise
        from .rank.printable import printable
        print(f"error: hpctrain failed unexpectedly: {type(exc).__name__}: {printable(str(exc))}\n  fix: this "
              "is a bug in hpctrain: please report it with the command you ran "
              "(HPCTRAIN_DEBUG=1 shows where it happened)", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
