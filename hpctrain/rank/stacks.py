"""`hpctrain attach RUN --stacks`, on each node: SIGQUIT to this node's ranks of the run.

The bootstrap registered faulthandler on SIGQUIT (bootstrap.main): each rank writes every thread's
stack to its log (logs/rank-R.log) and goes on; the hang watcher's dump (watch.kill_ranks) is the
same one. The caller reads the logs; this prints one line per rank signalled.
"""
import os
import signal
import socket

from .records import read_identities
from .watch import _is_rank


def signal_ranks(run_dir: str) -> int:
    me = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    for ident in read_identities(run_dir):
        if ident.node != me or not ident.pid or not _is_rank(ident.pid, run_dir):
            continue
        try:
            os.kill(ident.pid, signal.SIGQUIT)
        except ProcessLookupError:
            continue
        print(f"hpctrain stacks: rank {ident.rank} pid {ident.pid} on {me}", flush=True)
    return 0
