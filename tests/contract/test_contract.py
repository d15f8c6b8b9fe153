"""The contract suite over every registered plugin (built-in and installed)."""

from harness.contract import *  # noqa: F401,F403
