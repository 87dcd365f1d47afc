"""From a job file to a launch plan: load (site profile + job + overrides), every check made once
at load (checks, and each feature's own: containers, sbatch options, chains, sweeps, preemption),
and the plan — every decision about the launch as plain values for the templates."""
