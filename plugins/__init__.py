"""Built-in plugins of minimax-bench, registered through the same hooks as third-party ones."""
