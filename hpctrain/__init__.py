"""hpctrain: one job.yaml -> a correct multi-node RL training run on Slurm (or this machine)."""
__version__ = "0.1.0"
