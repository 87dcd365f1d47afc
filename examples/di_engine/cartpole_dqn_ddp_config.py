"""DI-engine's dizoo CartPole DQN DDP config (ding 0.5.3), cut to a few seconds of training.

As upstream: policy.multi_gpu=True and `with DDPContext(): serial_pipeline(...)` in __main__;
hpctrain starts it with torchrun (library: di_engine, config: this file) from the run directory,
so ./cartpole_dqn_ddp/ (checkpoints, logs) lands in the run. It installs no signal handler:
under hpctrain, the bootstrap's di_engine hooks save ./cartpole_dqn_ddp/ckpt/iteration_<n>.pth.tar
after the next learner iteration following SIGTERM or the preemption signal and let
serial_pipeline return; the next run resumes from it through DI-engine's own resume
(hpctrain/rank/during/train_hooks.py).

Added for checking: every rank writes results/rank-R.json with the sha256 of its Q-network
before the first training iteration and at the end, its DQN loss of the first and the last
iteration and the iteration it reached, and a line in results/attempts.jsonl (iteration started
from, reached), recorded by learner hooks of ours (DI-engine's own extension point; added only
when this file runs as the script). --sleep slows each iteration down, --save-interval is the
learner's save_ckpt_after_iter.
"""
import hashlib
import json
import os
import socket

from easydict import EasyDict

cartpole_dqn_config = dict(
    exp_name='cartpole_dqn_ddp',
    env=dict(
        collector_env_num=2,
        evaluator_env_num=1,
        n_evaluator_episode=1,
        stop_value=195,
    ),
    policy=dict(
        multi_gpu=True,
        cuda=True,
        model=dict(obs_shape=4, action_shape=2, encoder_hidden_size_list=[128, 128, 64], dueling=True),
        nstep=1,
        discount_factor=0.97,
        learn=dict(update_per_collect=5, batch_size=64, learning_rate=0.001),
        collect=dict(n_sample=8),
        eval=dict(evaluator=dict(eval_freq=40, )),
        other=dict(
            eps=dict(type='exp', start=0.95, end=0.1, decay=10000),
            replay_buffer=dict(replay_buffer_size=20000, ),
        ),
    ),
)
main_config = EasyDict(cartpole_dqn_config)
create_config = EasyDict(dict(
    env=dict(type='cartpole', import_names=['dizoo.classic_control.cartpole.envs.cartpole_env']),
    env_manager=dict(type='base'),  # in-process envs: 2 cores are shared by every rank
    policy=dict(type='dqn'),
))


def digest(model) -> str:
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


if __name__ == "__main__":
    import argparse

    import torch
    from ding.entry import serial_pipeline
    from ding.model import DQN
    from ding.utils import DDPContext, get_rank, get_world_size
    from ding.worker import LearnerHook, register_learner_hook

    import time

    p = argparse.ArgumentParser()
    p.add_argument("--max-env-step", type=int, default=400)
    p.add_argument("--save-interval", type=int, default=10000, help="save_ckpt_after_iter")
    p.add_argument("--sleep", type=float, default=0.0, help="seconds to sleep after each iteration")
    p.add_argument("--stop-value", type=float, default=195, help="the evaluator's stop_value")
    args = p.parse_args()
    main_config.env.stop_value = args.stop_value
    seen = {}

    class RecordLearning(LearnerHook):
        """What DI-engine's learner holds. Before the run: the policy's model, whose parameters
        Policy.__init__ broadcast from rank 0 (multi_gpu), and the iteration it starts from
        (a resumed run's). After each training iteration: this rank's total_loss (the DQN TD
        loss) in the learner's log buffer, read before DI-engine's LogReduceHook (priority 10)
        averages it over the ranks and LogShowHook (20) clears it."""

        def __call__(self, engine):
            if self.position == 'before_run':
                seen['initial_params_sha256'] = digest(engine.policy.get_attribute('model'))
                seen['started_from'] = engine.last_iter.val
            else:
                seen.setdefault('first_loss', engine.log_buffer['scalar']['total_loss'])
                seen['last_loss'] = engine.log_buffer['scalar']['total_loss']
                seen['reached'] = engine.last_iter.val + 1  # after_iter runs before the count moves
                time.sleep(args.sleep)

    register_learner_hook('record_learning', RecordLearning)
    main_config.policy.learn.learner = EasyDict(hook=dict(
        # before_run: after load_ckpt_before_run (priority 20), so a loaded checkpoint is what counts
        record_initial=dict(name='record_initial', type='record_learning', position='before_run', priority=30),
        record_loss=dict(name='record_loss', type='record_learning', position='after_iter', priority=5),
        save_ckpt_after_iter=args.save_interval,
    ))
    with DDPContext():
        # serial_pipeline seeds every rank alike (seed=0, as upstream: ranks that differ in their
        # episodes make ding's DDP collector all-reduce mismatched dtypes), so the Q-network it
        # builds would start equal on every rank anyway. Build it from a per-rank seed instead:
        # equal initial digests then show Policy.__init__'s broadcast from rank 0.
        torch.manual_seed(get_rank())
        model = DQN(**main_config.policy.model)
        policy = serial_pipeline((main_config, create_config), seed=0, model=model,
                                 max_env_step=args.max_env_step)
        rank, world = get_rank(), get_world_size()
        host = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
        out = os.path.join(os.environ.get("HPCTRAIN_RUN_DIR", "."), "results")
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, f"rank-{rank}.json"), "w") as f:
            json.dump({"rank": rank, "world_size": world, "params_sha256": digest(policy._model),
                       "initial_params_sha256": seen.get('initial_params_sha256'),
                       "loss": "DQN total_loss (DI-engine learner log buffer)",
                       "first_loss": seen.get('first_loss'), "last_loss": seen.get('last_loss'),
                       "iteration": seen.get('reached'), "host": host}, f)
        with open(os.path.join(out, "attempts.jsonl"), "a") as f:
            f.write(json.dumps({
                "rank": rank, "world_size": world, "started_from": seen.get('started_from'),
                "resume_from": os.environ.get("HPCTRAIN_RESUME_FROM"), "reached": seen.get('reached'),
                "job_restart": int(os.environ.get("SLURM_RESTART_COUNT", 0)), "host": host,
                "params_sha256": digest(policy._model)}) + "\n")
