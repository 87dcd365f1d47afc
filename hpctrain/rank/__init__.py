"""Everything that runs on the nodes: the rank side of hpctrain.

Standard library only, and self-contained: at submit time this folder is copied into the run
directory as RUN_DIR/rank/ and the job runs it from there by path (`python RUN_DIR/rank ...`,
see __main__.py), under whatever interpreter the job uses (Isaac Sim's python, a container's),
so a run keeps working whatever later happens to the installed hpctrain.

    bootstrap.py   prepare one rank (identity, log, env, resume, CPU shims or GPU pin), run the program
    preflight.py   the node barrier before torchrun, the rank meeting before the program
    cpu_shims.py   what each RL library needs to run its distributed mode on CPU with gloo
    hooks.py       the post-import hook the shims and the device pin use
    progress.py    report(step, **metrics): how far a rank got, for status and hang detection
    records.py     the run directory's records (run.json, bootstrap.json, rank status, failure)
    ddp.py         DDPContext: a helper for plain torch.distributed training programs
"""
