"""The contract suite on this package's plugin:

    MINIMAX_BENCH_CONTRACT_PLUGINS=example pytest tests
"""

from harness.contract import *  # noqa: F401,F403
