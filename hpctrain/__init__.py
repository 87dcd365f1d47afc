"""hpctrain: one job.yaml -> a correct multi-node RL training run on Slurm (or this machine).

The Python API is loaded on first use (module __getattr__), so `import hpctrain` and the CLI
stay cheap: nothing heavy (submitit, torch) is imported until a function is submitted.

    import hpctrain
    job = hpctrain.load_job("job.yaml", site="localcluster", overrides=["resources.nodes=2"])
    print(hpctrain.render(job))
    h = hpctrain.submit_function(fn, job)      # or hpctrain.submit(job) for its command
    h.wait(); h.result(); h.logs(rank=0); h.status(); h.cancel(); h.run_dir
"""
__version__ = "0.1.0"

_LAZY = {
    "load_job": "python_api", "override": "python_api", "render": "python_api",
    "validate": "python_api", "submit": "python_api", "submit_function": "python_api",
    "handle": "python_api", "Handle": "python_api", "JobFailed": "python_api",
    "Job": "loading", "HpctrainError": "errors",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'hpctrain' has no attribute {name!r}")
    from importlib import import_module
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + list(_LAZY))


__all__ = ["__version__", *_LAZY]
