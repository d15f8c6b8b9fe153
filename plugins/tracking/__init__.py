"""Trackers: the MLflow run hooks, the helper process and the run records."""
