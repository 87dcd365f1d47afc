"""One node-list expander timed in its own process: import it, then expand the list REPS times.
Prints the median seconds of one expansion, the host count and a digest of the result, so bench/run
can check that every implementation returns the same hosts.
    python bench/hostlist_peer.py hpctrain|submitit|python-hostlist TEXT_FILE REPS
"""
import hashlib
import statistics
import sys
import time

impl, path, reps = sys.argv[1], sys.argv[2], int(sys.argv[3])
if impl == "hpctrain":
    from hpctrain.backends.ssh.hostlist import expand
elif impl == "submitit":
    from submitit.slurm.slurm import _parse_node_list as expand
elif impl == "python-hostlist":
    from hostlist import expand_hostlist

    def expand(text):
        return expand_hostlist(text, allow_duplicates=True, sort=False)
else:
    raise SystemExit(f"unknown implementation {impl}")
text = open(path).read().strip()
times = []
for _ in range(reps):
    t0 = time.perf_counter()
    hosts = expand(text)
    times.append(time.perf_counter() - t0)
digest = hashlib.sha1("\n".join(hosts).encode()).hexdigest()[:12]
print(f"{statistics.median(times):.9f} {len(hosts)} {digest}")
