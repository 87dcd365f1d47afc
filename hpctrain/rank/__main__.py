"""Entry point of the run directory's copy of the rank side: `python RUN_DIR/rank COMMAND ...`.

    run CONFIG.json                        bootstrap one rank (torchrun or srun start it)
    launch TIMEOUT TORCHRUN-ARGS...        one node's launch: the node barrier, then torchrun's agent
    preflight TIMEOUT                      the node barrier alone, one task per node
    netfloor TIMEOUT MIN_GBPS              one node's part of the network floor (netfloor.py, preflight.py)
    summarize RUN_DIR REASON STATUS [MSG]  write status/failure.json (the batch shell, on failure)
    probe facts|reach|gate ...             what a node says about itself (probe.py: site detect, doctor)
    container RUNTIME... -- RUN-ARGS...    one task's Podman/Docker container, signals forwarded
    archive RUN_DIR                        move status/failure.json into status/failures.jsonl
    recover RUN_DIR MAX_EXCLUDED           after a failure: "requeue NODES|-" or "end", and why
    slow RUN_DIR MAX_EXCLUDED              an attempt's end: its slow ranks named (slow.py), maybe excluded
    watch RUN_DIR TIMEOUT                  the hang watcher (exits 3 on a hang)
    kill-ranks RUN_DIR                     end this node's ranks of the run (after a hang)
    stacks RUN_DIR                         this node's ranks dump their stacks to their logs (attach --stacks)
    agent TORCHRUN-ARGS...                 torchrun's agent after the health gate (preflight.agent); a signal sent to it is an ending (ending.py)
    stopped RUN_DIR SIG STATUS [STARTED]   status/stopped.json after a signal ended the launch
    end-ranks RUN_DIR [GRACE]              end this node's ranks that outlived the launch
    sample RUN_DIR PARENT NNODES           this node's GPU/CPU sampler (sampler.py; launch and agent start it)
    idle-stopped RUN_DIR STATUS [STARTED]  the sampler stopped the run for idle GPUs: its record
    cuda-probe N                           a tiny CUDA allocation on cuda:0..N-1, one JSON line (health.py)
    notify RUN_DIR VAR FORMAT EVENTS EVENT [DETAIL]  send one event to the webhook in $VAR (notify.py)
    spares pick|replace RUN_DIR NNODES ALLOCATION ...  an attempt's nodes; a spare for a blamed node (spares.py)
    export RUN_DIR LIBRARY CHECKPOINT NAME [SAMPLES]  a checkpoint's policy as ONNX + TorchScript, checked (after/export.py)

Python runs this file with the folder as sys.path[0]. The folder is loaded as a package under a
private name instead, so that its modules cannot shadow the program's (a user's `records.py`) or
be shadowed by them, and the folder leaves sys.path before the program runs.
"""
import os
import sys

if not __package__:  # python RUN_DIR/rank: the run directory's copy
    import importlib.util

    _here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or ".") == _here:
        del sys.path[0]
    _spec = importlib.util.spec_from_file_location(
        "_hpctrain_rank", os.path.join(_here, "__init__.py"), submodule_search_locations=[_here])
    _package = importlib.util.module_from_spec(_spec)
    sys.modules["_hpctrain_rank"] = _package
    _spec.loader.exec_module(_package)

_PACKAGE = __package__ or "_hpctrain_rank"


def _module(name: str):
    """The one module of the rank side a command needs: a rank's start imports the bootstrap
    alone (container, probe and the rest cost it milliseconds on every rank)."""
    import importlib
    return importlib.import_module(f"{_PACKAGE}.{name}")


USAGE = ("usage: rank run CONFIG.json | launch TIMEOUT TORCHRUN-ARGS... | preflight TIMEOUT | summarize RUN_DIR REASON STATUS "
         "[MESSAGE] | probe ... | archive RUN_DIR | recover RUN_DIR MAX_EXCLUDED | slow RUN_DIR MAX_EXCLUDED | "
         "watch RUN_DIR TIMEOUT | kill-ranks RUN_DIR | stacks RUN_DIR | container RUNTIME... -- RUN-ARGS... | "
         "agent TORCHRUN-ARGS... | stopped RUN_DIR SIG STATUS [STARTED] | end-ranks RUN_DIR [GRACE] | "
         "sample RUN_DIR PARENT NNODES | idle-stopped RUN_DIR STATUS [STARTED] | "
         "notify RUN_DIR VAR FORMAT EVENTS EVENT [DETAIL] | spares pick|replace RUN_DIR NNODES ... | "
         "export RUN_DIR LIBRARY CHECKPOINT NAME [SAMPLES]")


def recover(run_dir: str, max_excluded: int) -> int:
    """One line for the batch shell: "requeue NODE,NODE|- WHY" or "end - WHY"."""
    requeue, nodes, why = _module("end.recovery").decide(run_dir, max_excluded,
                                                     os.environ.get("SLURM_JOB_ID"))
    print(f"{'requeue' if requeue else 'end'} {','.join(nodes) or '-'} {why}")
    return 0


def main(args: list[str]) -> int:
    command, rest = (args[0], args[1:]) if args else ("", [])
    if command == "run" and len(rest) == 1:
        return _module("before.bootstrap").main(rest[0])
    if command == "launch" and len(rest) >= 2:
        _module("during.sampler").start(rest[1:])  # one per node, beside the ranks
        return _module("before.preflight").launch(float(rest[0]), rest[1:])
    if command == "preflight" and len(rest) == 1:
        return _module("before.preflight").step(float(rest[0]))
    if command == "netfloor" and len(rest) == 2:
        return _module("before.preflight").network_floor(rest[0], rest[1])
    if command == "container":
        return _module("before.container").main(rest)
    if command == "summarize" and len(rest) >= 3 and rest[2].lstrip("-").isdigit():
        return _module("before.bootstrap").summarize(rest[0], rest[1], int(rest[2]), " ".join(rest[3:]))
    if command == "probe":
        return _module("before.probe").main(rest)
    if command == "archive" and len(rest) == 1:
        _module("records").archive_job_failure(rest[0])
        return 0
    if command == "slow" and len(rest) == 2 and rest[1].isdigit():
        return _module("during.slow").verdict(rest[0], int(rest[1]))
    if command == "recover" and len(rest) == 2 and rest[1].isdigit():
        return recover(rest[0], int(rest[1]))
    if command == "watch" and len(rest) == 2:
        return _module("during.watch").watch(rest[0], float(rest[1]))
    if command == "kill-ranks" and len(rest) == 1:
        return _module("during.watch").kill_ranks(rest[0])
    if command == "stacks" and len(rest) == 1:
        return _module("during.stacks").signal_ranks(rest[0])
    if command == "agent":
        _module("during.sampler").start(rest)
        return _module("before.preflight").agent(rest)
    if command == "stopped" and len(rest) in (3, 4) and rest[2].lstrip("-").isdigit():
        started = float(rest[3]) if len(rest) == 4 and rest[3].isdigit() else 0.0
        return _module("end.ending").stopped(rest[0], rest[1], int(rest[2]), started)
    if command == "end-ranks" and len(rest) in (1, 2):
        return _module("end.ending").end_ranks(rest[0], float(rest[1]) if len(rest) == 2 else 10.0)
    if command == "sample" and len(rest) == 3 and rest[1].isdigit() and rest[2].isdigit():
        return _module("during.sampler").main(rest[0], int(rest[1]), int(rest[2]))
    if command == "idle-stopped" and len(rest) in (2, 3) and rest[1].lstrip("-").isdigit():
        started = float(rest[2]) if len(rest) == 3 and rest[2].isdigit() else 0.0
        return _module("during.sampler").idle_stopped(rest[0], int(rest[1]), started)
    if command == "cuda-probe" and len(rest) == 1 and rest[0].isdigit():
        import json
        print(json.dumps(_module("before.health").probe(int(rest[0]))), flush=True)
        return 0
    if command == "spares":
        return _module("before.spares").main(rest)
    if command == "export":
        return _module("after.export").main(rest)
    if command == "notify" and len(rest) in (5, 6):
        return _module("end.notify").from_job(*rest)
    print(USAGE, file=sys.stderr)
    return 2


sys.exit(main(sys.argv[1:]))
