"""submitit's side of the render rows: what SlurmExecutor does before it calls sbatch.

One job: set the parameters, write the sbatch text (`_make_submission_file_text`, which is
`_make_sbatch_string`). A sweep (`map_array`): pickle one DelayedSubmission per variant into the
folder, then one array script with map_count = variants. sbatch itself is not called.
    python bench/peer_submitit.py FOLDER NODES [SWEEP_SIZE]
"""
import itertools
import sys

import submitit
from submitit.core import utils


def train(lr: float, entropy: float, seed: int) -> None:  # what the pickles name
    raise SystemExit("never run: the benchmark only prepares the submission")


folder, nodes = sys.argv[1], int(sys.argv[2])
sweep = int(sys.argv[3]) if len(sys.argv) > 3 else 0
ex = submitit.SlurmExecutor(folder=folder)
ex.update_parameters(job_name="bench-train", nodes=nodes, ntasks_per_node=4, gpus_per_node=4,
                     cpus_per_task=2, time=60)
if sweep:
    array_folder = utils.JobPaths.get_first_id_independent_folder(ex.folder)
    array_folder.mkdir(parents=True, exist_ok=True)
    grid = itertools.product(range(10), range(10), range(10))
    for i, (lr, entropy, seed) in enumerate(itertools.islice(grid, sweep)):
        d = utils.DelayedSubmission(train, lr * 1e-4, entropy * 1e-3, seed)
        d.set_timeout(60, ex.max_num_timeout)
        d.dump(array_folder / f"{i}.pkl")
    ex.parameters["map_count"] = sweep
sys.stdout.write(ex._make_submission_file_text(ex._submitit_command_str, "uid"))
