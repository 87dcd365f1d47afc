"""Studies: hyperparameter search with pruning over the job's own launch (issue 41). The one
place that imports Optuna."""
