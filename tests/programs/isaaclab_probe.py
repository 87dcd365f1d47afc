"""What a test reads of a real Isaac Lab 3.0 rsl_rl training on every rank, through Isaac Lab's
own extension point (`--external_callback isaaclab_probe.install`, run by each rank's
`isaaclab train` before the training): nothing of Isaac Lab or rsl-rl is changed.

After each PPO update it writes $HPCTRAIN_RUN_DIR/results/rank-R.json (and
attempt-A-rank-R.json, A the job's restart count) (tests/e2e/learning.py's
shape): the digest of the weights as the library synchronised them at the start of this
attempt's training (rank 0's, broadcast) and now, the surrogate loss of the first and the last
update, the iteration the runner reached and the one it started from, and the learning rate and
entropy coefficient PPO started with (a study's or a population's values).
"""
from __future__ import annotations

import hashlib
import json
import os
import socket


def _digest(alg) -> str:
    h = hashlib.sha256()
    for model in (alg._raw_actor, alg._raw_critic):
        for name, tensor in sorted(model.state_dict().items()):
            h.update(name.encode())
            h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def install() -> None:
    from rsl_rl.algorithms import ppo
    from rsl_rl.runners import on_policy_runner

    state: dict = {"rank": int(os.environ.get("RANK", "0")),
                   "world_size": int(os.environ.get("WORLD_SIZE", "1")),
                   "hostname": socket.gethostname(), "loss": "surrogate"}
    results = os.path.join(os.environ["HPCTRAIN_RUN_DIR"], "results")
    attempt = os.environ.get("SLURM_RESTART_COUNT", "0")
    outs = [os.path.join(results, f"rank-{state['rank']}.json"),
            os.path.join(results, f"attempt-{attempt}-rank-{state['rank']}.json")]
    os.makedirs(results, exist_ok=True)
    broadcast, update, learn = ppo.PPO.broadcast_parameters, ppo.PPO.update, on_policy_runner.OnPolicyRunner.learn

    def learn_probe(self, *args, **kwargs):
        state["started_from"] = self.current_learning_iteration
        return learn(self, *args, **kwargs)

    def broadcast_probe(self):
        broadcast(self)
        state["initial_params_sha256"] = _digest(self)

    def update_probe(self):
        # The values the trial or member was started with (a study's or PBT's overrides).
        state.setdefault("learning_rate", float(self.learning_rate))
        state.setdefault("entropy_coef", float(self.entropy_coef))
        losses = update(self)
        loss = float(losses["surrogate"])
        state.setdefault("first_loss", loss)
        state["last_loss"] = loss
        state["params_sha256"] = _digest(self)
        # The runner counts from the iteration it loaded (0 fresh): this update's iteration.
        state["updates"] = state.get("updates", 0) + 1
        state["iteration"] = state["started_from"] + state["updates"] - 1
        for out in outs:
            with open(out + ".tmp", "w") as f:
                json.dump(state, f)
            os.replace(out + ".tmp", out)
        return losses

    ppo.PPO.broadcast_parameters = broadcast_probe
    ppo.PPO.update = update_probe
    on_policy_runner.OnPolicyRunner.learn = learn_probe
