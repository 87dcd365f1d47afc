"""CPU-mode shims: let an RL library's own distributed mode run on CPU with gloo.

In CPU mode (no GPU) the bootstrap installs the shims that the job's library adapter names
(libraries/*.py: ``cpu_shims``), before it runs the training program in-process. Every supported
library creates its own process group and hard-codes NCCL/CUDA, so on a CPU-only machine a 2-rank
run dies in the library, not in the user's code. These shims remove exactly those CUDA
assumptions and nothing else, so the library's real distributed code path (rank bookkeeping,
parameter broadcast, gradient all-reduce, rank-0 checkpoints) still runs.

- Deferred: each shim is armed with the post-import hook (hooks.after_import) on the module it
  patches, so nothing is imported here and skrl's import-time init_process_group already sees it.
- Defensive: every torch-side patch first asks ``torch.cuda.is_available()`` and leaves
  everything untouched when CUDA works. Patches are idempotent (marked ``_hpctrain_cpu_mode``).
- Each applied patch prints one ``[hpctrain cpu_mode]`` line on stderr (``APPLIED`` lists them;
  ``HPCTRAIN_CPU_MODE_QUIET=1`` silences it).

The shims, by name (``SHIMS``):

- torch: ``init_process_group`` forced to gloo when asked for NCCL; ``torch.cuda.set_device`` a
  no-op.
- rl_games: the agent config's ``device`` (A2CBase sets cuda:LOCAL_RANK and reads it back) kept
  at ``cpu``.
- rsl_rl: ``OnPolicyRunner._configure_multi_gpu`` without its ``device == cuda:LOCAL_RANK`` check.
- isaaclab (Isaac Lab 3.0's one CLI): ``--distributed`` puts the simulation (and so the agent) on
  the CPU instead of ``cuda:LOCAL_RANK``; ``validate_distributed_device`` lets a CPU device through.
- jax: ``jax.experimental.multihost_utils`` imported with jax (skrl uses it without importing it).
- di_engine: ``dist_init`` without ``rank % torch.cuda.device_count()``; ``LogReduceHook`` on
  CPU (its scalar ``allreduce_data``/``reduce_data`` are fixed on every device by the train
  hooks, train_hooks.py).

Each shim is small and says WHY next to it; examples/rl/NOTES.md records the runs that needed them.
"""

from __future__ import annotations

import functools
import os
import sys

from ..during.hooks import after_import, follow_reexports

__all__ = ["SHIMS", "APPLIED", "install"]

#: Descriptions of the patches that have actually been applied in this process.
APPLIED: list[str] = []

_MARK = "_hpctrain_cpu_mode"


def _log(msg: str) -> None:
    APPLIED.append(msg)
    if os.environ.get("HPCTRAIN_CPU_MODE_QUIET") != "1":
        print(f"[hpctrain cpu_mode] {msg}", file=sys.stderr, flush=True)


def _cuda_available() -> bool:
    # Only called from hooks that run after torch is imported; never imports torch itself.
    torch = sys.modules.get("torch")
    try:
        return bool(torch is not None and torch.cuda.is_available())
    except Exception:
        return False


def _is_cuda_str(value) -> bool:
    return isinstance(value, str) and value.strip().lower().startswith("cuda")


# --------------------------------------------------------------------------------------------
# torch: gloo + no-op set_device (every torch library)
# --------------------------------------------------------------------------------------------


def _gloo_backend(backend):
    # 'nccl', 'cuda:nccl' and 'cpu:gloo,cuda:nccl' all name NCCL, which needs a GPU; gloo runs
    # the same collectives on CPU. Other backends (gloo, mpi, None = torch's default) are kept.
    if backend is not None and "nccl" in str(backend).lower():
        return "gloo"
    return backend


def _patch_torch(torch) -> None:
    if _cuda_available():
        _log("CUDA is available: torch left untouched")
        return
    dist = getattr(torch, "distributed", None)
    if dist is not None and dist.is_available() and not getattr(dist.init_process_group, _MARK, False):
        original = dist.init_process_group

        @functools.wraps(original)
        def init_process_group(*args, **kwargs):
            # WHY: rl-games, rsl-rl, skrl and DI-engine hard-code backend="nccl" (positionally or
            # as keyword); NCCL needs CUDA. Keep every other argument as the library passed it.
            if args:
                args = (_gloo_backend(args[0]),) + tuple(args[1:])
            elif "backend" in kwargs:
                kwargs["backend"] = _gloo_backend(kwargs["backend"])
            # WHY: device_id=cuda:N or N (torch >= 2.3) binds the group to a GPU that is not there.
            device_id = kwargs.get("device_id")
            if device_id is not None and (isinstance(device_id, int) or "cuda" in str(device_id)):
                kwargs.pop("device_id")
            return original(*args, **kwargs)

        setattr(init_process_group, _MARK, True)
        dist.init_process_group = init_process_group
        c10d = getattr(dist, "distributed_c10d", None)  # for `from ...distributed_c10d import`
        if c10d is not None:
            c10d.init_process_group = init_process_group
        _log("torch.distributed.init_process_group: NCCL backend -> gloo")

    if not getattr(torch.cuda.set_device, _MARK, False):

        def set_device(device):
            # WHY: every library calls torch.cuda.set_device(LOCAL_RANK) after creating the group;
            # on a CPU build that raises. There is no device to select, so do nothing.
            return None

        setattr(set_device, _MARK, True)
        torch.cuda.set_device = set_device
        _log("torch.cuda.set_device: no-op")


# --------------------------------------------------------------------------------------------
# rl-games
# --------------------------------------------------------------------------------------------


class _CpuDeviceConfig(dict):
    """rl-games agent config that refuses CUDA device strings.

    WHY: with multi_gpu, A2CBase.__init__ does ``config['device'] = 'cuda:' + LOCAL_RANK`` and a few
    lines later ``self.ppo_device = config.get('device', 'cuda:0')``, then allocates on it. Storing
    ``cpu`` instead is the narrowest place: no rl-games code is copied or reordered.
    """

    _KEYS = ("device", "device_name")

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for key in self._KEYS:
            if _is_cuda_str(self.get(key)):
                dict.__setitem__(self, key, "cpu")
        if "device" not in self:  # rl-games' own default is 'cuda:0'
            dict.__setitem__(self, "device", "cpu")

    def __setitem__(self, key, value) -> None:
        if key in self._KEYS and _is_cuda_str(value):
            value = "cpu"
        super().__setitem__(key, value)


def _patch_rl_games(a2c_common) -> None:
    if _cuda_available():
        return
    cls = a2c_common.A2CBase
    if getattr(cls.__init__, _MARK, False):
        return
    original = cls.__init__

    @functools.wraps(original)
    def __init__(self, base_name, params, *args, **kwargs):
        cfg = params.get("config") if isinstance(params, dict) else None
        if isinstance(cfg, dict) and not isinstance(cfg, _CpuDeviceConfig):
            params["config"] = _CpuDeviceConfig(cfg)  # shallow copy; nested dicts stay shared
        return original(self, base_name, params, *args, **kwargs)

    setattr(__init__, _MARK, True)
    cls.__init__ = __init__
    _log("rl_games A2CBase: config['device'] kept at 'cpu' (library sets cuda:LOCAL_RANK)")


# --------------------------------------------------------------------------------------------
# rsl-rl
# --------------------------------------------------------------------------------------------


def _patch_rsl_rl(on_policy_runner) -> None:
    if _cuda_available():
        return
    cls = on_policy_runner.OnPolicyRunner
    if getattr(cls._configure_multi_gpu, _MARK, False):
        return
    original = cls._configure_multi_gpu

    @functools.wraps(original)
    def _configure_multi_gpu(self):
        # WHY: the original raises ValueError unless self.device == f"cuda:{LOCAL_RANK}". Present
        # exactly that value for the duration of the call, so the library's own logic (ranks,
        # cfg["multi_gpu"], init_process_group -> gloo via the torch shim) runs unchanged; then
        # restore the real device (a CUDA one can only mean cpu here).
        device = self.device
        self.device = f"cuda:{int(os.getenv('LOCAL_RANK', '0'))}"
        try:
            original(self)
        finally:
            self.device = "cpu" if _is_cuda_str(str(device)) else device

    setattr(_configure_multi_gpu, _MARK, True)
    cls._configure_multi_gpu = _configure_multi_gpu
    _log("rsl_rl OnPolicyRunner._configure_multi_gpu: device check skipped")


# --------------------------------------------------------------------------------------------
# Isaac Lab 3.0's own launcher
# --------------------------------------------------------------------------------------------


def _patch_isaaclab_launcher(sim_launcher) -> None:
    original = sim_launcher._resolve_distributed_device
    if getattr(original, _MARK, False):
        return

    @functools.wraps(original)
    def _resolve_distributed_device(cfg, args):
        # WHY: with --distributed, 3.0 always puts the simulation on cuda:LOCAL_RANK (or cuda:0)
        # and calls set_cuda_device; the agent then takes the simulation's device. Without a GPU
        # both belong on the CPU. Decided at call time: with CUDA the original runs untouched.
        if not args.get("distributed", False) or _cuda_available():
            return original(cfg, args)
        sim_cfg = getattr(cfg, "sim", None)
        if sim_cfg is not None:
            sim_cfg.device = "cpu"
        args["device"] = "cpu"
        return None

    setattr(_resolve_distributed_device, _MARK, True)
    sim_launcher._resolve_distributed_device = _resolve_distributed_device
    _log("isaaclab launch_simulation: --distributed on the CPU (not cuda:LOCAL_RANK)")


def _patch_isaaclab_entrypoints(common) -> None:
    original = common.validate_distributed_device
    if getattr(original, _MARK, False):
        return

    @functools.wraps(original)
    def validate_distributed_device(args_cli):
        # WHY: 3.0 refuses a CPU device with --distributed ("not supported"); gloo runs the
        # same collectives on CPU. Read by the training backends with `from ..common import`,
        # after this hook replaced it. With CUDA the original check stands.
        if _cuda_available():
            return original(args_cli)
        return None

    setattr(validate_distributed_device, _MARK, True)
    common.validate_distributed_device = validate_distributed_device
    _log("isaaclab validate_distributed_device: CPU allowed with --distributed")


# --------------------------------------------------------------------------------------------
# skrl (JAX)
# --------------------------------------------------------------------------------------------


def _patch_jax(jax) -> None:
    # WHY: skrl's JAX models call jax.experimental.multihost_utils.broadcast_one_to_all but skrl
    # only does `import jax`; with jax 0.10.2 that submodule is not loaded implicitly
    # (AttributeError). Importing it is harmless on any device and does not initialise a backend
    # (which must not happen before skrl's jax.distributed.initialize), so no CUDA probe here.
    import importlib

    importlib.import_module("jax.experimental.multihost_utils")
    _log("jax.experimental.multihost_utils imported")


# --------------------------------------------------------------------------------------------
# DI-engine
# --------------------------------------------------------------------------------------------


def _patch_ding(helper) -> None:
    if _cuda_available():
        return
    original = helper.dist_init
    if getattr(original, _MARK, False):
        return
    dist = helper.dist

    @functools.wraps(original)
    def dist_init(backend="nccl", addr=None, port=None, rank=None, world_size=None):
        # WHY: ding's dist_init ends with torch.cuda.set_device(rank % torch.cuda.device_count()),
        # a ZeroDivisionError without GPUs. Same steps as ding 0.5.3, minus that line, gloo.
        os.environ["MASTER_ADDR"] = addr or os.environ.get("MASTER_ADDR", "localhost")
        os.environ["MASTER_PORT"] = port or os.environ.get("MASTER_PORT", "10314")
        if rank is None:
            rank = os.environ.get("SLURM_LOCALID", os.environ.get("RANK"))
            if rank is None:
                raise RuntimeError("please indicate rank explicitly in dist_init method")
        if world_size is None:
            world_size = os.environ.get("SLURM_NTASKS", os.environ.get("WORLD_SIZE"))
            if world_size is None:
                raise RuntimeError("please indicate world_size explicitly in dist_init method")
        rank, world_size = int(rank), int(world_size)
        dist.init_process_group(backend=_gloo_backend(backend), rank=rank, world_size=world_size)
        return helper.get_rank(), helper.get_world_size()

    replacements = {"dist_init": dist_init}
    setattr(dist_init, _MARK, True)
    # Module globals: DDPContext looks dist_init up here at call time, and ding.utils copies
    # the name when it imports (after this hook has run). Scalar reductions (allreduce_data,
    # reduce_data: `.cuda()` in ding) are replaced on every device by the di_engine train hook,
    # which reduces on the process group's device (train_hooks._hook_ding_scalar_reductions).
    before = {name: getattr(helper, name) for name in replacements}
    for name, fn in replacements.items():
        setattr(helper, name, fn)
    follow_reexports("ding.utils", helper, before)
    _log("ding dist_init: gloo, no torch.cuda.set_device(rank % device_count)")


def _patch_ding_learner_hook(learner_hook) -> None:
    if _cuda_available() or getattr(learner_hook.get_rank, _MARK, False):
        return

    def get_rank():
        # WHY: LogReduceHook does `tensor.to(get_rank())` before all-reducing the learner's logs,
        # i.e. moves it to cuda:<global rank>. In this module get_rank is used for nothing else,
        # so answering "cpu" here keeps the reduction on CPU and changes nothing else.
        return "cpu"

    setattr(get_rank, _MARK, True)
    learner_hook.get_rank = get_rank
    _log("ding LogReduceHook: log tensors reduced on cpu, not cuda:<rank>")


# --------------------------------------------------------------------------------------------
# Public entry point
# --------------------------------------------------------------------------------------------

# name -> (module to patch, patch function, description) for each shim.
SHIMS: dict[str, list[tuple[str, object, str]]] = {
    "torch": [("torch", _patch_torch, "torch.distributed.init_process_group: NCCL backend -> gloo; "
                                      "torch.cuda.set_device: no-op")],
    "rl_games": [("rl_games.common.a2c_common", _patch_rl_games,
                  "rl_games A2CBase: config['device'] cuda:N -> cpu")],
    "rsl_rl": [("rsl_rl.runners.on_policy_runner", _patch_rsl_rl,
                "rsl_rl OnPolicyRunner._configure_multi_gpu: no cuda:LOCAL_RANK device check")],
    "isaaclab": [("isaaclab.app.sim_launcher", _patch_isaaclab_launcher,
                  "isaaclab launch_simulation: --distributed on the CPU"),
                 ("isaaclab_rl.entrypoints.common", _patch_isaaclab_entrypoints,
                  "isaaclab validate_distributed_device: CPU allowed")],
    "jax": [("jax", _patch_jax, "jax.experimental.multihost_utils imported with jax")],
    "di_engine": [("ding.utils.pytorch_ddp_dist_helper", _patch_ding,
                   "ding dist_init: gloo, no torch.cuda.set_device"),
                  ("ding.worker.learner.learner_hook", _patch_ding_learner_hook,
                   "ding LogReduceHook: log tensors reduced on cpu, not cuda:<rank>")],
}

_installed: set[tuple[str, str]] = set()


def install(names) -> list[str]:
    """Arm the named shims (see SHIMS); returns what was armed, for the log. Safe to call before
    torch/jax are imported and more than once. Unknown names raise ValueError."""
    unknown = [n for n in names if n not in SHIMS]
    if unknown:
        raise ValueError(f"unknown CPU shim(s) {', '.join(unknown)}; known: {', '.join(SHIMS)}")
    torch = sys.modules.get("torch")
    if torch is not None and _cuda_available():
        return []  # defensive: CPU mode makes no sense with a usable GPU
    armed: list[str] = []
    for name in names:
        for module, patch, desc in SHIMS[name]:
            if (name, module) not in _installed:
                _installed.add((name, module))
                after_import(module, patch)
            armed.append(desc)
    return armed
