"""A small runtime helper for plain PyTorch DDP scripts (library: command), in the spirit of
DI-engine's DDPContext. torch is imported lazily: the CLI never imports this module.

    from hpctrain.rank.ddp import DDPContext
    with DDPContext() as ctx:
        model = torch.nn.parallel.DistributedDataParallel(net.to(ctx.device))
        ...
        stats = ctx.all_sum({"return": ep_return, "episodes": 1})
        if ctx.should_stop(rank0_says_stop): break
        if ctx.is_main: torch.save(...)

Without torchrun's variables it runs as a world of one, so the same script runs stand-alone.
"""
from __future__ import annotations

import datetime
import os


class DDPContext:
    """Process group with the backend that fits the device, the rank's device, and teardown."""

    def __init__(self, backend: str | None = None, timeout_s: float | None = None) -> None:
        self._backend = backend
        timeout = timeout_s or os.environ.get("HPCTRAIN_COLLECTIVE_TIMEOUT")
        self._timeout = float(timeout) if timeout else None
        self.rank = int(os.environ.get("RANK", "0"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self.device = None
        self.backend = None
        self._owns_group = False

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def __enter__(self) -> "DDPContext":
        import torch
        import torch.distributed as dist

        cuda = torch.cuda.is_available()
        if cuda:
            # All of the node's GPUs are visible (hpctrain never masks per rank); fall back to
            # cuda:0 when something else left one.
            index = self.local_rank if self.local_rank < torch.cuda.device_count() else 0
            torch.cuda.set_device(index)
            self.device = torch.device("cuda", index)
        else:
            self.device = torch.device("cpu")
        self.backend = self._backend or ("nccl" if cuda else "gloo")
        if self.distributed and not dist.is_initialized():
            kwargs = {}
            if self._timeout:
                kwargs["timeout"] = datetime.timedelta(seconds=self._timeout)
            dist.init_process_group(self.backend, rank=self.rank, world_size=self.world_size, **kwargs)
            self._owns_group = True
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        import torch.distributed as dist

        if self._owns_group and dist.is_initialized():
            if exc_type is None:
                dist.barrier()  # nobody leaves while a peer still needs it
            # On an exception the peers may wait in a collective forever: do not barrier, just
            # leave; torchrun then ends the others.
            dist.destroy_process_group()
        self._owns_group = False
        return False

    # ------------------------------------------------------------------------- collectives

    def all_sum(self, stats: dict[str, float]) -> dict[str, float]:
        """Sum each value over all ranks (every rank gets the sums); keys must agree."""
        if not self.distributed:
            return {k: float(v) for k, v in stats.items()}
        import torch
        import torch.distributed as dist

        keys = sorted(stats)
        t = torch.tensor([float(stats[k]) for k in keys], dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return dict(zip(keys, t.tolist()))

    def should_stop(self, flag: bool) -> bool:
        """Rank 0's decision, on every rank: ranks must leave a training loop together."""
        if not self.distributed:
            return bool(flag)
        import torch
        import torch.distributed as dist

        t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=self.device)
        dist.broadcast(t, src=0)
        return bool(t.item())

    def barrier(self) -> None:
        if self.distributed:
            import torch.distributed as dist
            dist.barrier()


__all__ = ["DDPContext"]
