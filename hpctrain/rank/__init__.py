"""Everything that runs on the nodes: the rank side of hpctrain.

Standard library only, and self-contained: at submit time this folder is copied into the run
directory as RUN_DIR/rank/ and the job runs it from there by path (`python RUN_DIR/rank ...`,
see __main__.py), under whatever interpreter the job uses (Isaac Sim's python, a container's),
so a run keeps working whatever later happens to the installed hpctrain.

Grouped by when the code runs (tests/unit/test_layout.py: a module imports its own group, the
groups that run after it, and what stays here at rank/):

    before/    before training: bootstrap (prepare a rank, run the program), preflight (the node
               barrier, the rank meeting), check (doctor's program), health (the GPU gate),
               netfloor, probe (what a node says about itself), cpu_shims, container, spares,
               gpu_models (which GPUs can render)
    during/    while it trains: hooks and train_hooks (progress, save on a signal), watch (hangs),
               sampler (GPU use, idle GPUs), slow (slow ranks), stacks, culprit, flight (recorder)
    end/       at the end: stop, ending, recovery (requeue or end, which node to leave out),
               notify, checkpoints (which one the next attempt resumes from)
    records.py the run directory's records (run.json, bootstrap.json, rank status, failure)
    phases.py  the start-up marks; tools.py the bounded tool runner; printable.py the one cleaning
    progress.py, ddp.py   what training programs import: report(step, **metrics), DDPContext
"""
