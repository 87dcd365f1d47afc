"""Entry point of the run directory's copy of the rank side: `python RUN_DIR/rank COMMAND ...`.

    run CONFIG.json                        bootstrap one rank (torchrun or srun start it)
    preflight TIMEOUT                      the node barrier, one task per node
    summarize RUN_DIR REASON STATUS [MSG]  write status/failure.json (the batch shell, on failure)
    probe facts|reach|gate ...             what a node says about itself (probe.py: site detect, doctor)
    container RUNTIME... -- RUN-ARGS...    one task's Podman/Docker container, signals forwarded

Python runs this file with the folder as sys.path[0]. The folder is loaded as a package under a
private name instead, so that its modules cannot shadow the program's (a user's `records.py`) or
be shadowed by them, and the folder leaves sys.path before the program runs.
"""
import os
import sys

if __package__:  # python -m hpctrain.rank: the installed package
    from . import bootstrap, container, preflight, probe
else:
    import importlib.util

    _here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or ".") == _here:
        del sys.path[0]
    _spec = importlib.util.spec_from_file_location(
        "_hpctrain_rank", os.path.join(_here, "__init__.py"), submodule_search_locations=[_here])
    _package = importlib.util.module_from_spec(_spec)
    sys.modules["_hpctrain_rank"] = _package
    _spec.loader.exec_module(_package)
    from _hpctrain_rank import bootstrap, container, preflight, probe  # noqa: E402

USAGE = ("usage: rank run CONFIG.json | preflight TIMEOUT | summarize RUN_DIR REASON STATUS "
         "[MESSAGE] | probe ... | container RUNTIME... -- RUN-ARGS...")


def main(args: list[str]) -> int:
    command, rest = (args[0], args[1:]) if args else ("", [])
    if command == "run" and len(rest) == 1:
        return bootstrap.main(rest[0])
    if command == "preflight" and len(rest) == 1:
        return preflight.nodes(float(rest[0]))
    if command == "container":
        return container.main(rest)
    if command == "summarize" and len(rest) >= 3 and rest[2].lstrip("-").isdigit():
        return bootstrap.summarize(rest[0], rest[1], int(rest[2]), " ".join(rest[3:]))
    if command == "probe":
        return probe.main(rest)
    print(USAGE, file=sys.stderr)
    return 2


sys.exit(main(sys.argv[1:]))
