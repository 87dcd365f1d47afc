"""Slurm: sbatch/squeue/sacct/scancel (backend), their records' parsing (records), what a site
detect learns from a cluster (detect), the login-node transport for clusters reached over
ssh (login), and the REST one for clusters reached through slurmrestd (rest, restapi, restjobs)."""
from .backend import SlurmBackend

__all__ = ["SlurmBackend"]
