"""The job.yaml and site-profile schema: the typed fields (spec), bounded line-numbered YAML
loading (yamlfile), and where each value came from (origins). Knows nothing of planning,
rendering or schedulers."""
