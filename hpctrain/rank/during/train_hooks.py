"""Library hooks at every iteration boundary: progress, and save-and-stop after a signal.

The stock training scripts (Isaac Lab's train.py for rl_games, rsl_rl and skrl; a DI-engine
config) install no signal handler and report no progress. These hooks add both from outside,
armed by the bootstrap with the same post-import hook as the CPU shims (hooks.after_import), and
declared per library in libraries/*.py (`train_hooks`). At each iteration boundary of the
library's own loop they:

1. report progress — hpctrain_progress.report(iteration, <main metric>) — on every rank: what
   `status` shows and what the hang watcher (watch.py) reads;
2. agree with the other ranks whether any of them was asked to stop (stop.py: SIGTERM or the
   preemption signal). If so, the rank that saves normally saves a checkpoint with the
   library's own save, at this iteration, under the library's own name; every rank waits
   for it; the library's training call then returns as if it had reached its end, and the
   script finishes normally (closes its environments, exits 0).

A run that hpctrain resumed (its checkpoint is $HPCTRAIN_RESUME_FROM) continues to the total
the job asked for, not that many more: skrl's trainer starts again at timestep 0 after
agent.load() and rsl-rl's learn(n) runs n more iterations; both are offset here. rl-games
(max_epochs is absolute) and DI-engine (max_env_step) need nothing. DI-engine has no resume
option on its command line: its own resume (learner hook load_ckpt_before_run plus
policy.learn.resume_training) is switched on here when hpctrain resumes it.

Each hook that no longer fits a library release prints a warning and leaves the library as it
is (hooks._call_hook). What each one patches, and why there, is next to it.
"""
from __future__ import annotations

import functools
import os
import re

from .. import progress

from ..end import stop
from . import video
from .hooks import after_import, follow_reexports

_MARK = "_hpctrain_train_hook"
APPLIED: list[str] = []


def _log(msg: str) -> None:
    APPLIED.append(msg)
    stop.hooked()


def _resume_path() -> str | None:
    path = os.environ.get("HPCTRAIN_RESUME_FROM")
    return os.path.realpath(path) if path else None


def _is_resume(path) -> bool:
    """Whether `path` is the checkpoint hpctrain handed to this run."""
    mine = _resume_path()
    try:
        return bool(mine) and os.path.realpath(os.fspath(path)) == mine
    except TypeError:
        return False


def _wrap(cls, name: str, make) -> bool:
    """Replace cls.name (a class's method or a module's function) by make(original), once."""
    original = cls.__dict__.get(name)
    if original is None or getattr(original, _MARK, False):
        return False
    wrapper = functools.wraps(original)(make(original))
    setattr(wrapper, _MARK, True)
    setattr(cls, name, wrapper)
    return True


def _number(value):
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if out == out else None  # NaN is no metric


def _report(step, **metrics) -> None:
    progress.report(int(step), **{k: v for k, v in metrics.items() if _number(v) is not None})


def _stop_now(agree) -> bool:
    """Every rank calls this at every boundary: the ranks agree in one collective."""
    return agree(stop.requested() is not None)


# --------------------------------------------------------------------------------------------
# rsl-rl: OnPolicyRunner.learn() runs range(current, current + n); Logger.log() ends each
# iteration (after the update, before the periodic save): the boundary.
# --------------------------------------------------------------------------------------------

def _hook_rsl_rl_runner(module) -> None:
    cls = module.OnPolicyRunner

    def make_load(original):
        def load(self, path, *args, **kwargs):
            out = original(self, path, *args, **kwargs)
            if _is_resume(path):
                self._hpctrain_resumed = True
            return out
        return load

    def make_learn(original):
        def learn(self, num_learning_iterations, *args, **kwargs):
            if getattr(self, "_hpctrain_resumed", False):
                # learn(n) continues n iterations from the loaded one: a requeued run would train
                # longer with every requeue. Up to the same last iteration instead.
                num_learning_iterations = max(0, num_learning_iterations - self.current_learning_iteration)
            self.logger._hpctrain_runner = self
            try:
                return original(self, num_learning_iterations, *args, **kwargs)
            except stop.StopTraining:
                if self.logger.writer is not None:
                    self.logger.stop_logging_writer()
                return None
        return learn

    if _wrap(cls, "load", make_load) | _wrap(cls, "learn", make_learn):
        _log("rsl_rl OnPolicyRunner.learn: resumed runs end at the same total")


def _hook_rsl_rl_logger(module) -> None:
    def make_log(original):
        def log(self, *args, **kwargs):
            out = original(self, *args, **kwargs)
            it = kwargs.get("it", args[0] if args else None)
            runner = getattr(self, "_hpctrain_runner", None)
            if it is None or runner is None:
                return out
            rewards = getattr(self, "rewbuffer", None)
            _report(it, reward=sum(rewards) / len(rewards) if rewards else None)
            if _stop_now(stop.agree_torch):
                path = None
                if self.writer is not None and self.log_dir:  # rank 0, as rsl-rl's own saves
                    path = os.path.join(self.log_dir, f"model_{it}.pt")
                    runner.save(path)
                stop.barrier_torch()
                stop.stopped_at(it, path)
                stop.announce(f"SIG{stop.requested() or '?'}: iteration {it} saved to {path}"
                              if path else f"iteration {it}: stopped (rsl-rl saves nothing here: "
                              "no log_dir)")
                raise stop.StopTraining
            return out
        return log

    if _wrap(module.Logger, "log", make_log):
        _log("rsl_rl Logger.log: progress, save and stop at the iteration's end")


# --------------------------------------------------------------------------------------------
# rl-games: train() loops over train_epoch(); after it, rank 0 saves 'last_<name>_ep_<E>...' and
# every rank returns once epoch_num >= max_epochs. On a stop: max_epochs = this epoch.
# --------------------------------------------------------------------------------------------

def _hook_rl_games(a2c_common) -> None:
    def make_train_epoch(original):
        def train_epoch(self, *args, **kwargs):
            out = original(self, *args, **kwargs)
            epoch = self.epoch_num
            reward = None
            rewards = getattr(self, "game_rewards", None)
            if rewards is not None and getattr(rewards, "current_size", 0) > 0:
                reward = rewards.get_mean()[0]
            _report(epoch, reward=reward)
            if _stop_now(stop.agree_torch):
                # rl-games' own end of training: rank 0 saves this epoch's 'last_' checkpoint,
                # broadcasts should_exit, and every rank returns from train().
                self.max_epochs = epoch
                stop.stopped_at(epoch, None)
                stop.announce(f"SIG{stop.requested() or '?'}: rl-games saves epoch {epoch} and ends")
            return out
        return train_epoch

    hooked = False
    for name in ("ContinuousA2CBase", "DiscreteA2CBase"):
        cls = getattr(a2c_common, name, None)
        if cls is not None:
            hooked |= _wrap(cls, "train_epoch", make_train_epoch)
    if hooked:
        _log("rl_games train_epoch: progress, and on a stop max_epochs = this epoch")


# --------------------------------------------------------------------------------------------
# skrl (torch and JAX alike): the trainer calls agent.post_interaction(timestep) after every
# environment step; an on-policy agent updates when its rollout is full. skrl names checkpoints
# by timestep and restarts its trainer at 0 after agent.load(): a resumed run is offset by the
# loaded checkpoint's timestep, so that names, TensorBoard steps and the total continue.
# --------------------------------------------------------------------------------------------

_SKRL_TIMESTEP = re.compile(r"agent_(\d+)\.(pt|pickle)$")


def _skrl_agent_hooks(base, agree, barrier, framework: str) -> bool:
    cls = base.Agent

    def make_load(original):
        def load(self, path, *args, **kwargs):
            out = original(self, path, *args, **kwargs)
            m = _SKRL_TIMESTEP.search(os.path.basename(os.fspath(path)))
            if m and _is_resume(path):
                self._hpctrain_resumed_timestep = int(m.group(1))
            return out
        return load

    def make_post(original):
        def post_interaction(self, *, timestep, timesteps):
            offset = getattr(self, "_hpctrain_offset", 0)
            # Read before the call: at every write_interval skrl writes its tracking data to
            # TensorBoard and clears it. Episodes end rarely, so the newest mean is kept.
            rewards = self.tracking_data.get("Reward / Total reward (mean)")
            newest = _number(rewards[-1]) if rewards else None
            if newest is not None:
                self._hpctrain_reward = newest
            out = original(self, timestep=timestep + offset, timesteps=timesteps + offset)
            rollouts = getattr(getattr(self, "cfg", None), "rollouts", None)
            rollout = getattr(self, "_rollout", None)
            if rollouts and rollout is not None and (not self.training or rollout % rollouts):
                return out  # mid-rollout: no update happened, nothing that could be resumed
            step = timestep + offset + 1  # skrl's own count, as in its checkpoint names
            _report(step, reward=getattr(self, "_hpctrain_reward", None))
            if _stop_now(agree):
                path = None
                if self.checkpoint_interval and self.checkpoint_interval > 0:  # rank 0, as skrl
                    os.makedirs(os.path.join(self.experiment_dir, "checkpoints"), exist_ok=True)
                    self.write_checkpoint(timestep=step, timesteps=timesteps + offset)
                    ext = "pt" if framework == "torch" else "pickle"
                    path = os.path.join(self.experiment_dir, "checkpoints", f"agent_{step}.{ext}")
                barrier()
                stop.stopped_at(step, path)
                stop.announce(f"SIG{stop.requested() or '?'}: timestep {step} saved to {path}"
                              if path else f"timestep {step}: stopped")
                raise stop.StopTraining
            return out
        return post_interaction

    return _wrap(cls, "load", make_load) | _wrap(cls, "post_interaction", make_post)


def _skrl_trainer_hooks(module, class_name: str) -> bool:
    cls = getattr(module, class_name, None)
    if cls is None:
        return False

    def make_train(original):
        def train(self, *args, **kwargs):
            agents = self.agents if isinstance(self.agents, (list, tuple)) else [self.agents]
            start = getattr(agents[0], "_hpctrain_resumed_timestep", 0)
            if start and not getattr(agents[0], "_hpctrain_offset", 0):
                for agent in agents:
                    agent._hpctrain_offset = start
                self.cfg.timesteps = max(0, self.cfg.timesteps - start)
            try:
                return original(self, *args, **kwargs)
            except stop.StopTraining:
                return None
        return train

    return _wrap(cls, "train", make_train)


def _hook_skrl_torch_agent(base) -> None:
    if _skrl_agent_hooks(base, stop.agree_torch, stop.barrier_torch, "torch"):
        _log("skrl Agent.post_interaction: progress, save and stop after an update")


def _hook_skrl_jax_agent(base) -> None:
    if _skrl_agent_hooks(base, stop.agree_jax, stop.barrier_jax, "jax"):
        _log("skrl (JAX) Agent.post_interaction: progress, save and stop after an update")


def _hook_skrl_jax_signals(skrl) -> None:
    # `import skrl` ran jax.distributed.initialize (JAX_WORLD_SIZE > 1), whose preemption
    # notifier takes SIGTERM over and swallows it: take it back.
    stop.reclaim()
    _log("skrl (JAX): SIGTERM taken back from jax.distributed's preemption notifier")


def _hook_skrl_trainer_base(module) -> None:
    if _skrl_trainer_hooks(module, "Trainer"):
        _log("skrl Trainer.train: ends at a stop; a resumed run continues its timesteps")


def _hook_skrl_trainer_sequential(module) -> None:
    _skrl_trainer_hooks(module, "SequentialTrainer")  # several agents loop here, not in Trainer


# --------------------------------------------------------------------------------------------
# DI-engine: serial_pipeline() loops collect -> learner.train() (one iteration each); the
# learner's save hook writes ./<exp_name>/ckpt/iteration_<n>.pth.tar on rank 0.
# --------------------------------------------------------------------------------------------

def _hook_ding_learner(module) -> None:
    def make_train(original):
        def train(self, *args, **kwargs):
            out = original(self, *args, **kwargs)
            logs = out[0] if isinstance(out, list) and out else out
            loss = logs.get("total_loss") if isinstance(logs, dict) else None
            step = self.train_iter
            _report(step, loss=loss)
            if _stop_now(stop.agree_torch):
                path = None
                if self.rank == 0:
                    self.save_checkpoint()  # the learner's own 'save_ckpt_after_run' hook
                    path = f"./{self.exp_name}/ckpt/iteration_{step}.pth.tar"
                stop.barrier_torch()
                stop.stopped_at(step, path)
                stop.announce(f"SIG{stop.requested() or '?'}: iteration {step} saved to {path}"
                              if path else f"iteration {step}: stopped")
                raise stop.StopTraining
            return out
        return train

    if _wrap(module.BaseLearner, "train", make_train):
        _log("ding BaseLearner.train: progress, save and stop after an iteration")


def _hook_ding_scalar_reductions(helper) -> None:
    """ding's DDP collector all-reduces its per-collect counts as Python scalars through
    allreduce_data/reduce_data, which build torch.as_tensor([x]): int64 on a rank where the value
    is an int and float32 where it is a float. `collected_duration = sum(episode times)` is the
    int 0 on a rank that has not finished an episode since its last log line and a float on one
    that has, so as soon as the ranks' episodes differ (a resumed run, per-rank seeds) the ranks
    meet with 8 and 4 bytes: gloo aborts ("8 vs 4"), NCCL hangs or reduces garbage. Every scalar
    is reduced as float64 on every rank instead (exact for counts below 2**53), on the process
    group's device, and given back as the type it came in as."""
    torch, dist = helper.torch, helper.dist

    def tensor(x):
        device = "cpu"
        if "nccl" in str(dist.get_backend()).lower():  # NCCL reduces CUDA tensors only
            device = torch.device("cuda", torch.cuda.current_device())
        return torch.tensor([float(x)], dtype=torch.float64, device=device)

    def back(x, t):
        # A count comes back a count; a sum of durations stays a float on every rank, even on
        # the one that passed the int 0.
        value = t.item()
        integral = isinstance(x, (int, helper.np.integer)) and not isinstance(x, bool)
        return int(value) if integral and value.is_integer() else value

    def make_allreduce(original):
        def allreduce_data(x, op):
            if not helper.np.isscalar(x):
                return original(x, op)
            assert op in ("sum", "avg"), op
            t = tensor(x)
            dist.all_reduce(t)
            if op == "avg":
                t.div_(helper.get_world_size())
                return t.item()  # an average of counts is no count
            return back(x, t)
        return allreduce_data

    def make_reduce(original):
        def reduce_data(x, dst):
            if not helper.np.isscalar(x):
                return original(x, dst)
            t = tensor(x)
            dist.reduce(t, dst)
            return back(x, t)
        return reduce_data

    before = {name: helper.__dict__.get(name) for name in ("allreduce_data", "reduce_data")}
    changed = _wrap(helper, "allreduce_data", make_allreduce) | \
        _wrap(helper, "reduce_data", make_reduce)
    # ding.utils re-exports both (and the collectors import them from there, later).
    follow_reexports("ding.utils", helper, before)
    if changed:
        _log("ding allreduce_data/reduce_data: scalars reduced as float64 on every rank")


def _resuming_compile_config(original):
    @functools.wraps(original)
    def compile_config(cfg, *args, **kwargs):
        path = os.environ.get("HPCTRAIN_RESUME_FROM")
        if path:
            # DI-engine's own resume: the learner loads the checkpoint before the run (weights,
            # optimizer, iteration), the collector continues its env steps, and the experiment
            # directory is kept rather than renamed with a time stamp.
            learn = cfg.policy.learn
            mapping = type(learn)  # DI-engine's EasyDict: attribute and key alike
            if "learner" not in learn:
                learn.learner = mapping()
            if "hook" not in learn.learner:
                learn.learner.hook = mapping()
            learn.learner.hook.load_ckpt_before_run = path
            learn.resume_training = True
            kwargs["renew_dir"] = False
        return original(cfg, *args, **kwargs)
    return compile_config


def _hook_ding_serial_entry(module) -> None:
    created: dict = {}
    create_policy = module.create_policy

    @functools.wraps(create_policy)
    def record_policy(*args, **kwargs):
        created["policy"] = create_policy(*args, **kwargs)
        return created["policy"]

    def make_pipeline(original):
        def serial_pipeline(*args, **kwargs):
            try:
                return original(*args, **kwargs)
            except stop.StopTraining:
                return created.get("policy")  # what serial_pipeline returns at its end
        return serial_pipeline

    module.create_policy = record_policy
    module.compile_config = _resuming_compile_config(module.compile_config)
    pipeline = module.serial_pipeline
    if not getattr(pipeline, _MARK, False):
        wrapper = functools.wraps(pipeline)(make_pipeline(pipeline))
        setattr(wrapper, _MARK, True)
        module.serial_pipeline = wrapper
        _log("ding serial_pipeline: returns its policy after a stop; a resumed run loads "
             "hpctrain's checkpoint (DI-engine's own resume)")


# --------------------------------------------------------------------------------------------

# name -> [(module to patch, patch function)], armed by install().
HOOKS: dict[str, list[tuple[str, object]]] = {
    "rsl_rl": [("rsl_rl.runners.on_policy_runner", _hook_rsl_rl_runner),
               ("rsl_rl.utils.logger", _hook_rsl_rl_logger)],
    "rl_games": [("rl_games.common.a2c_common", _hook_rl_games)],
    "skrl": [("skrl.agents.torch.base", _hook_skrl_torch_agent),
             ("skrl.trainers.torch.base", _hook_skrl_trainer_base),
             ("skrl.trainers.torch.sequential", _hook_skrl_trainer_sequential)],
    "skrl_jax": [("skrl", _hook_skrl_jax_signals),
                 ("skrl.agents.jax.base", _hook_skrl_jax_agent),
                 ("skrl.trainers.jax.base", _hook_skrl_trainer_base),
                 ("skrl.trainers.jax.sequential", _hook_skrl_trainer_sequential)],
    "di_engine": [("ding.utils.pytorch_ddp_dist_helper", _hook_ding_scalar_reductions),
                  ("ding.worker.learner.base_learner", _hook_ding_learner),
                  ("ding.entry.serial_entry", _hook_ding_serial_entry)],
    # not a library's: the ceiling on a job's video clips (video.py), armed with video:
    "video": [("isaaclab.envs.utils.video_recorder", video.hook_isaaclab_recorder),
              ("gymnasium.wrappers", video.hook_gymnasium_record_video)],
}

_armed: set[tuple[str, str]] = set()


def install(names) -> list[str]:
    """Arm the named libraries' hooks (see HOOKS); nothing is imported here. Unknown names
    raise ValueError."""
    unknown = [n for n in names if n not in HOOKS]
    if unknown:
        raise ValueError(f"unknown train hook(s) {', '.join(unknown)}; known: {', '.join(HOOKS)}")
    armed = []
    for name in names:
        for module, patch in HOOKS[name]:
            if (name, module) not in _armed:
                _armed.add((name, module))
                after_import(module, patch)
            armed.append(f"{name}: {module}")
    return armed


__all__ = ["HOOKS", "APPLIED", "install"]
