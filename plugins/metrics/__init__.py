"""Checkpoint metrics: the exact optimum OPT and group metrics."""
