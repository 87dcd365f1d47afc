"""TorchX's side of the sweep rows. TorchX has no job arrays: a sweep is one dry-run (one sbatch
script) per variant, here through its Python API in one process — cheaper than N CLI runs.
    python bench/peer_torchx_sweep.py SWEEP_SIZE
"""
import itertools
import sys

from torchx.components.dist import ddp
from torchx.runner import get_runner

size = int(sys.argv[1])
runner = get_runner()
grid = itertools.product(range(10), range(10), range(10))
total = 0
for lr, entropy, seed in itertools.islice(grid, size):
    app = ddp("--epochs", "10", script="train.py", j="2x4", gpu=4,
              env={"LR": str(lr * 1e-4), "ENTROPY": str(entropy * 1e-3), "SEED": str(seed)})
    total += len(runner.dryrun(app, "slurm", cfg={}).request.materialize())
print(f"{size} scripts, {total} bytes")
