"""Hosts over ssh without a scheduler: the backend, the ssh side (openssh: one shared
connection, quoting for the remote shell) and host-list expansion (hostlist)."""
from .backend import SshBackend

__all__ = ["SshBackend"]
