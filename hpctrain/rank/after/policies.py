"""Each library's deployable policy, rebuilt from what the run recorded: the checkpoint's
state dict and the agent's config the training saved (params/agent.yaml), with the library's own
classes. Nothing is guessed: a layer count, a width or an input size comes from the state dict,
what is not in it (activations, the output's form, normalisation) from the config, and the
weights load strictly (every tensor named and shaped as the rebuilt policy's). A config that
does not say, or says what is not supported, is an ExportError naming the key.

The config is untrusted too: it only selects among names listed here (an activation, a class)
and gives numbers; no string of it reaches an import, the libraries' class resolution
(rsl_rl's `module:Class` names) or skrl's code generator unchecked.

A Policy holds the reference (the library's own model: its deterministic action) and the module
that is exported (observations -> actions, the same weights).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

from .sources import ExportError

MAX_LAYERS, MAX_UNITS = 64, 1 << 16
ACTIVATIONS = ("elu", "selu", "relu", "crelu", "lrelu", "tanh", "sigmoid", "softplus", "gelu",
               "swish", "mish", "identity")


@dataclass
class Policy:
    reference: Callable  # observations (batch, obs_dim) -> the library's deterministic actions
    module: Any  # torch.nn.Module: observations -> actions, what is exported
    obs_dim: int
    action_dim: int
    script: bool  # torch.jit.script it (else trace)
    what: str  # one line: the library, the model and its sizes
    onnx_module: Any = None  # the library's own ONNX form (rsl-rl's as_onnx), else `module`

    def onnx_form(self):
        """(module, example inputs, input names, output names) for torch.onnx.export."""
        import torch
        m = self.onnx_module
        if m is not None:
            return m, m.get_dummy_inputs(), m.input_names, m.output_names
        return self.module, (torch.zeros(1, self.obs_dim),), ["obs"], ["actions"]


def _get(cfg: dict, path: str, where: str):
    node: Any = cfg
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            raise ExportError(f"{where}: no '{path}' in the agent's config",
                              f"the config the training saved must say '{path}'")
        node = node[key]
    return node


def _units(value, key: str, where: str) -> list[int]:
    if not (isinstance(value, list) and 0 < len(value) <= MAX_LAYERS
            and all(isinstance(u, int) and not isinstance(u, bool) and 0 < u <= MAX_UNITS
                    for u in value)):
        raise ExportError(f"{where}: '{key}' is not a list of layer widths ({str(value)[:80]})",
                          f"restore {where}")
    return value


def _choice(value, allowed, key: str, where: str) -> str:
    if value not in allowed:
        raise ExportError(f"{where}: '{key}' is {str(value)[:60]!r}, which export does not know",
                          f"export supports {', '.join(map(str, allowed))}")
    return value


def _tensor(sd: dict, key: str, where: str, ndim: int):
    import torch
    t = sd.get(key) if isinstance(sd, dict) else None
    if not (isinstance(t, torch.Tensor) and t.ndim == ndim):
        raise ExportError(f"{where}: the checkpoint has no {ndim}-d tensor '{key}'",
                          "export a checkpoint of the policy the config describes")
    return t


def _fits(dims: list[int], sd: dict, where: str) -> None:
    """The network the config describes holds no more weights than the checkpoint: it is
    built before the weights load, and a config's widths must not make it allocate more."""
    import torch
    wanted = sum(a * b + b for a, b in zip(dims, dims[1:]))
    held = sum(t.numel() for t in sd.values() if isinstance(t, torch.Tensor))
    if wanted > held:
        raise ExportError(f"{where}: the config describes a network of {wanted} weights, the "
                          f"checkpoint holds {held}", "export the checkpoint with the config "
                          "its training saved")


def _load(model, sd, where: str) -> None:
    try:
        model.load_state_dict(sd, strict=True)
    except (RuntimeError, KeyError, TypeError) as exc:
        raise ExportError(f"{where}: the checkpoint's weights do not fit the policy the config "
                          f"describes ({str(exc).splitlines()[0][:300]})",
                          "export the checkpoint with the config its training saved") from None


# ----------------------------------------------------------------------------- rsl_rl
_RSL_DISTRIBUTIONS = {"GaussianDistribution": 1, "HeteroscedasticGaussianDistribution": 2,
                      "BetaDistribution": 2}


def rsl_rl(ckpt: dict, cfg: dict, where: str) -> Policy:
    """rsl-rl 5.x: the actor is an MLPModel (actor_state_dict); exported as rsl-rl's own
    runner.export_policy_to_jit/onnx do (model.as_jit(), model.as_onnx()), which Isaac Lab
    3.0's play calls."""
    import torch
    from rsl_rl.models import MLPModel
    from tensordict import TensorDict

    actor = _get(cfg, "actor", where)
    if not isinstance(actor, dict):
        raise ExportError(f"{where}: 'actor' is not a mapping", f"restore {where}")
    _choice(actor.get("class_name"), ("MLPModel",), "actor.class_name", where)
    hidden = _units(actor.get("hidden_dims"), "actor.hidden_dims", where)
    activation = _choice(actor.get("activation", "elu"), ACTIVATIONS, "actor.activation", where)
    normalize = actor.get("obs_normalization", False)
    if not isinstance(normalize, bool):
        raise ExportError(f"{where}: 'actor.obs_normalization' is not true or false", f"restore {where}")
    dist = actor.get("distribution_cfg")
    dist_cfg, slices = None, 1
    if dist is not None:
        if not isinstance(dist, dict):
            raise ExportError(f"{where}: 'actor.distribution_cfg' is not a mapping", f"restore {where}")
        name = _choice(dist.get("class_name"), tuple(_RSL_DISTRIBUTIONS),
                       "actor.distribution_cfg.class_name", where)
        slices = _RSL_DISTRIBUTIONS[name]
        dist_cfg = {"class_name": f"rsl_rl.modules.distribution:{name}"}
        for key, value in dist.items():
            if key == "class_name":
                continue
            ok = isinstance(value, (int, float, str, bool)) or (
                isinstance(value, list) and len(value) <= 8
                and all(isinstance(v, (int, float)) for v in value))
            if not ok or not re.fullmatch(r"[a-z_]{1,40}", key):
                raise ExportError(f"{where}: 'actor.distribution_cfg.{key[:40]}' is not a "
                                  "number, a name or a short list of numbers", f"restore {where}")
            dist_cfg[key] = tuple(value) if isinstance(value, list) else value
    sd = ckpt.get("actor_state_dict")
    first = _tensor(sd, "mlp.0.weight", "actor_state_dict", 2)
    last = _tensor(sd, f"mlp.{2 * len(hidden)}.weight", "actor_state_dict", 2)
    obs_dim, out = int(first.shape[1]), int(last.shape[0])
    if out % slices:
        raise ExportError(f"actor_state_dict: the last layer's {out} outputs do not fit "
                          f"{dist.get('class_name')}", "export the checkpoint with its own config")
    action_dim = out // slices
    _fits([obs_dim, *hidden, out], sd, where)
    obs = TensorDict({"policy": torch.zeros(1, obs_dim)}, batch_size=[1])
    try:
        model = MLPModel(obs, {"actor": ["policy"]}, "actor", action_dim, hidden_dims=hidden,
                         activation=activation, obs_normalization=normalize,
                         distribution_cfg=dist_cfg)
    except (TypeError, ValueError) as exc:
        raise ExportError(f"{where}: rsl-rl cannot build the actor the config describes ({exc})",
                          f"restore {where}") from None
    _load(model, sd, "actor_state_dict")
    model.eval()

    def reference(x):
        return model(TensorDict({"policy": x}, batch_size=[x.shape[0]]))

    return Policy(reference, model.as_jit(), obs_dim, action_dim, True,
                  f"rsl_rl MLPModel {obs_dim} -> {hidden} ({activation}) -> {action_dim}"
                  f"{', normalised observations' if normalize else ''}",
                  onnx_module=model.as_onnx(verbose=False))


# ----------------------------------------------------------------------------- rl_games
def rl_games(ckpt: dict, cfg: dict, where: str) -> Policy:
    """rl-games: the network rl-games' own ModelBuilder makes from params.model/network
    (continuous actions, no RNN, no CNN); the exported module is what rl-games' ONNX example
    wraps: norm_obs, then the network's mean action."""
    import torch
    from rl_games.algos_torch.model_builder import ModelBuilder

    params = _get(cfg, "params", where)
    model_name = _choice(_get(params, "model.name", where),
                         ("continuous_a2c_logstd", "continuous_a2c"), "params.model.name", where)
    network = _get(params, "network", where)
    if not isinstance(network, dict):
        raise ExportError(f"{where}: 'params.network' is not a mapping", f"restore {where}")
    _choice(network.get("name"), ("actor_critic",), "params.network.name", where)
    for key in ("rnn", "cnn"):
        if network.get(key):
            raise ExportError(f"{where}: the network has an {key.upper()}: export handles "
                              "feed-forward policies", "export a policy without params.network."
                              f"{key}, or export it with rl-games' own tools")
    if "continuous" not in (network.get("space") or {}):
        raise ExportError(f"{where}: 'params.network.space' is not continuous",
                          "export handles continuous actions")
    mlp = network.get("mlp")
    if not isinstance(mlp, dict):
        raise ExportError(f"{where}: no 'params.network.mlp'", f"restore {where}")
    units = _units(mlp.get("units"), "params.network.mlp.units", where)
    activation = _choice(mlp.get("activation"), ("relu", "tanh", "sigmoid", "elu", "selu", "swish",
                                                 "gelu", "softplus", "None"),
                         "params.network.mlp.activation", where)
    config = params.get("config") if isinstance(params.get("config"), dict) else {}
    normalize_input = config.get("normalize_input", False)
    normalize_value = config.get("normalize_value", False)
    if not (isinstance(normalize_input, bool) and isinstance(normalize_value, bool)):
        raise ExportError(f"{where}: 'params.config.normalize_input/normalize_value' are not "
                          "true or false", f"restore {where}")
    sd = ckpt.get("model")
    first_key = "a2c_network.actor_mlp.0.weight"
    first = _tensor(sd, first_key, "model", 2)
    mu = _tensor(sd, "a2c_network.mu.weight", "model", 2)
    obs_dim, action_dim = int(first.shape[1]), int(mu.shape[0])
    _fits([obs_dim, *units, action_dim], sd, where)
    builder = ModelBuilder()
    try:
        built = builder.load({"model": {"name": model_name},
                              "network": {**network, "mlp": {**mlp, "units": units,
                                                             "activation": activation}}})
        model = built.build({"actions_num": action_dim, "input_shape": (obs_dim,),
                             "num_seqs": 1, "value_size": 1,
                             "normalize_value": normalize_value,
                             "normalize_input": normalize_input})
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise ExportError(f"{where}: rl-games cannot build the network the config describes "
                          f"({exc})", f"restore {where}") from None
    _load(model, sd, "model")
    model.eval()

    normalizer = torch.nn.Identity()
    if normalize_input:
        # rl-games keeps its normaliser as a ScriptModule (torch.jit.script), which neither
        # torch.export nor a trace can enter: the same class unscripted, with the same state.
        from rl_games.algos_torch.running_mean_std import RunningMeanStd
        normalizer = RunningMeanStd((obs_dim,))
        _load(normalizer, model.running_mean_std.state_dict(), "model (running_mean_std)")
        normalizer.eval()

    class Actor(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.network, self.normalizer = inner.a2c_network, normalizer

        def forward(self, obs):
            mu, _logstd, _value, _states = self.network({"obs": self.normalizer(obs)})
            return mu

    def reference(x):
        with torch.no_grad():
            return model({"obs": x, "is_train": False})["mus"]

    return Policy(reference, Actor(model), obs_dim, action_dim, False,
                  f"rl_games {model_name} {obs_dim} -> {units} ({activation}) -> {action_dim}"
                  f"{', normalised observations' if normalize_input else ''}")


# ----------------------------------------------------------------------------- skrl (PyTorch)
_SKRL_OUTPUT = re.compile(r"((?:[0-9]{1,6}(?:\.[0-9]{1,6})?) \* )?(tanh\(ACTIONS\)|ACTIONS)")
_SKRL_ACTIVATIONS = ("relu", "tanh", "sigmoid", "leaky_relu", "elu", "softplus", "softsign",
                     "selu", "softmax", "")


def skrl(ckpt: dict, cfg: dict, where: str) -> Policy:
    """skrl (PyTorch): the policy its model instantiators build from models.policy, as Isaac
    Lab's skrl train.py builds it (one network of fully connected layers on the observations;
    `separate: false`: skrl's shared model, one network with a policy and a value head); the
    exported module is the mean action (before clipping), with the state preprocessor."""
    import gymnasium
    import numpy as np
    import torch
    from skrl.utils.model_instantiators.torch import deterministic_model, gaussian_model, shared_model

    policy = _get(cfg, "models.policy", where)
    if not isinstance(policy, dict):
        raise ExportError(f"{where}: 'models.policy' is not a mapping", f"restore {where}")
    kind = _choice(policy.get("class"), ("GaussianMixin", "DeterministicMixin"),
                   "models.policy.class", where)
    network = policy.get("network")
    if not (isinstance(network, list) and len(network) == 1 and isinstance(network[0], dict)):
        raise ExportError(f"{where}: 'models.policy.network' is not one network",
                          "export handles one fully connected network on the observations")
    net = network[0]
    name = net.get("name")
    if not (isinstance(name, str) and re.fullmatch(r"[a-z][a-z0-9_]{0,30}", name)):
        raise ExportError(f"{where}: 'models.policy.network[0].name' is not a plain name",
                          f"restore {where}")
    _choice(net.get("input"), ("OBSERVATIONS", "STATES"), "models.policy.network[0].input", where)
    layers = _units(net.get("layers"), "models.policy.network[0].layers", where)
    acts = net.get("activations", "")
    acts_list = acts if isinstance(acts, list) else [acts]
    for a in acts_list:
        _choice(a, _SKRL_ACTIVATIONS, "models.policy.network[0].activations", where)
    output = policy.get("output", "")
    if not (isinstance(output, str) and _SKRL_OUTPUT.fullmatch(output)):
        raise ExportError(f"{where}: 'models.policy.output' is {str(output)[:60]!r}",
                          "export handles ACTIONS, tanh(ACTIONS) and K * tanh(ACTIONS)")
    agent = cfg.get("agent") if isinstance(cfg.get("agent"), dict) else {}
    preprocessor = agent.get("state_preprocessor")
    _choice(preprocessor, (None, "RunningStandardScaler"), "agent.state_preprocessor", where)
    sd = ckpt.get("policy")
    first = _tensor(sd, f"{name}_container.0.weight", "policy", 2)
    obs_dim = int(first.shape[1])
    last = [k for k in (sd or {}) if re.fullmatch(rf"{name}_container\.[0-9]+\.weight", k)]
    head = "policy_layer.weight" if "policy_layer.weight" in (sd or {}) else \
        max(last, key=lambda k: int(k.split(".")[1]))
    action_dim = int(_tensor(sd, head, "policy", 2).shape[0])
    _fits([obs_dim, *layers, action_dim], sd, where)
    box = {"low": -np.inf, "high": np.inf, "dtype": np.float32}
    spaces = {"observation_space": gymnasium.spaces.Box(shape=(obs_dim,), **box),
              "action_space": gymnasium.spaces.Box(shape=(action_dim,), **box), "device": "cpu"}
    checked = {"network": [{"name": name, "input": net["input"], "layers": layers,
                            "activations": acts}], "output": output}
    # Clipping to the action space changes sampled actions, never the mean action exported
    # (and the bounds are not in the checkpoint): the rest of the Gaussian's settings are kept.
    for key in ("clip_log_std", "min_log_std", "max_log_std", "initial_log_std", "fixed_log_std"):
        value = policy.get(key)
        if isinstance(value, (bool, int, float)) and kind == "GaussianMixin":
            checked[key] = value
    shared = _get(cfg, "models", where).get("separate", True) is False
    try:
        if shared:  # one network, a policy head and a value head (Isaac Lab's default)
            _choice((cfg["models"].get("value") or {}).get("class"), ("DeterministicMixin",),
                    "models.value.class", where)
            model = shared_model(**spaces, structure=[kind, "DeterministicMixin"],
                                 roles=["policy", "value"], single_forward_pass=False,
                                 parameters=[checked, {"network": checked["network"],
                                                       "output": "ONE"}])
            model.init_state_dict(role="value")
        else:
            build = gaussian_model if kind == "GaussianMixin" else deterministic_model
            model = build(**spaces, **checked)
        model.init_state_dict(role="policy")
    except (TypeError, ValueError, KeyError, SyntaxError) as exc:
        raise ExportError(f"{where}: skrl cannot build the policy the config describes ({exc})",
                          f"restore {where}") from None
    _load(model, sd, "policy")
    model.eval()
    scaler = None
    if preprocessor:
        from skrl.resources.preprocessors.torch import RunningStandardScaler
        scaler = RunningStandardScaler(size=spaces["observation_space"], device="cpu")
        _load(scaler, ckpt.get("state_preprocessor"), "state_preprocessor")
        scaler.eval()

    def prepare(x):
        return scaler(x, train=False) if scaler is not None else x

    key = "observations" if net["input"] == "OBSERVATIONS" else "states"

    class Actor(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model, self.scaler = model, scaler

        def forward(self, obs):
            return self.model.compute({key: prepare(obs)}, role="policy")[0]

    def reference(x):
        with torch.no_grad():
            _actions, outputs = model.act({key: prepare(x)}, role="policy")
            return outputs["mean_actions"] if kind == "GaussianMixin" else _actions

    return Policy(reference, Actor(), obs_dim, action_dim, False,
                  f"skrl {kind} {obs_dim} -> {layers} ({acts}) -> {output} ({action_dim})"
                  f"{', RunningStandardScaler' if scaler is not None else ''}")


BUILDERS = {"rsl_rl": rsl_rl, "rl_games": rl_games, "skrl": skrl}
