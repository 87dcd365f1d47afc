"""DI-engine's dizoo CartPole DQN DDP config (ding 0.5.3), cut to a few seconds of training.

As upstream: policy.multi_gpu=True and `with DDPContext(): serial_pipeline(...)` in __main__;
hpctrain starts it with torchrun (library: di_engine, config: this file) from the run directory,
so ./cartpole_dqn_ddp/ (checkpoints, logs) lands in the run. Added for checking: every rank writes
results/rank-R.json with the sha256 of its final Q-network.
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

if __name__ == "__main__":
    import argparse

    from ding.entry import serial_pipeline
    from ding.utils import DDPContext, get_rank, get_world_size

    p = argparse.ArgumentParser()
    p.add_argument("--max-env-step", type=int, default=400)
    args = p.parse_args()
    with DDPContext():
        policy = serial_pipeline((main_config, create_config), seed=0, max_env_step=args.max_env_step)
        rank, world = get_rank(), get_world_size()
        h = hashlib.sha256()
        for name, t in sorted(policy._model.state_dict().items()):
            h.update(name.encode())
            h.update(t.detach().cpu().contiguous().numpy().tobytes())
        out = os.path.join(os.environ.get("HPCTRAIN_RUN_DIR", "."), "results")
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, f"rank-{rank}.json"), "w") as f:
            json.dump({"rank": rank, "world_size": world, "params_sha256": h.hexdigest(),
                       "host": os.environ.get("SLURMD_NODENAME") or socket.gethostname()}, f)
