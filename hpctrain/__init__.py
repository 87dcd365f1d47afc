"""hpctrain: one job.yaml -> a correct multi-node RL training run on Slurm (or this machine).

The Python API — the same jobs, sites, checks and run directories as the command line:

    import hpctrain
    job = hpctrain.load_job("job.yaml", site="localcluster", overrides=["resources.nodes=2"])
    print(hpctrain.render(job))                 # the script `hpctrain submit` would submit
    h = hpctrain.submit(job)                    # as `hpctrain submit job.yaml`
    h = hpctrain.submit_function(fn, job)       # fn on every rank, through submitit
    h.wait(); h.result(); h.logs(rank=0); h.status(); h.cancel(); h.run_dir
    h = hpctrain.Handle("20250101-120000-ab12") # any run, later
    s = hpctrain.Study("RUN"); s.best()         # a study: its best trial (number, value, params)

Mistakes raise HpctrainError with the CLI's messages; a failed run raises JobFailed (a kind of
HpctrainError) naming the rank and node. Names are loaded on first use, so `import hpctrain`
and the CLI stay cheap: nothing heavy (submitit, torch) is imported until a function is submitted.
"""
__version__ = "0.1.0"

_PUBLIC = {
    "load_job": "job.load", "render": "submission", "submit": "submission",
    "submit_function": "submission", "Handle": "follow.handle",
    "Study": "search.handle", "study_result": "search.handle",
    # The exceptions the five raise:
    "HpctrainError": "errors", "JobFailed": "follow.handle",
}


def __getattr__(name: str):
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'hpctrain' has no attribute {name!r}")
    from importlib import import_module
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + list(_PUBLIC))


__all__ = ["__version__", *_PUBLIC]
