"""`hpctrain attach RUN --stacks`, on each node: SIGQUIT to this node's ranks of the run.

The bootstrap registered faulthandler on SIGQUIT (bootstrap.main): each rank writes every thread's
stack to its log (logs/rank-R.log) and goes on; the hang watcher's dump (watch.kill_ranks) is the
same one. The caller reads the logs; this prints one line per rank signalled.
"""
import os
import signal

from .watch import node_ranks


def signal_ranks(run_dir: str) -> int:
    me, ranks = node_ranks(run_dir)
    for ident in ranks:
        try:
            os.kill(ident.pid, signal.SIGQUIT)
        except ProcessLookupError:
            continue
        print(f"hpctrain stacks: rank {ident.rank} pid {ident.pid} on {me}", flush=True)
    return 0
