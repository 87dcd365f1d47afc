"""Studies: hyperparameter search with pruning, run by workers inside allocations of the job's
shape (no controller on the login node). The one place that imports Optuna (the `search`
extra): spaces.py maps `search:` to Optuna's distributions, sampler and pruner; journal.py
keeps the study in the run directory (Optuna's journal file, NFS-safe lock); trials.py writes a
trial's run directory; worker.py is the loop each worker runs."""
