"""Models: per-row losses, gradients and their compiled forms."""
