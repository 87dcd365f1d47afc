"""Slurm: sbatch/squeue/sacct/scancel (backend), their records' parsing (records), what a site
detect learns from a cluster (detect), and the login-node transport for clusters reached over
ssh (login)."""
from .backend import SlurmBackend

__all__ = ["SlurmBackend"]
