"""Two models from outside the source tree, registered as an installed
package would register them (the ``register_models`` hook), for the tests
that run third-party models under every solver:

* ``huber_linear`` (``mmb_toy_models.huber.HuberLinear``): linear regression
  with the Huber loss, in numpy only (no compiled form);
* ``ovr_squared_hinge`` (``mmb_toy_models.squared_hinge.OvRSquaredHinge``):
  one-vs-rest linear classification with the squared hinge loss, with a
  compiled form offering the batch roles and the row roles of
  ``harness.protocols.Model``.

Neither shares code with the built-in models. Use: put this folder's parent
on ``sys.path`` and pass the module to ``harness.make_plugin_manager([...])``
(or ``harness.run(cfg, plugins=[...])``).
"""

from __future__ import annotations

import harness

from .huber import HuberLinear
from .squared_hinge import OvRSquaredHinge

__all__ = ["HuberLinear", "OvRSquaredHinge", "register_models"]


@harness.hookimpl
def register_models(register):
    register(HuberLinear)
    register(OvRSquaredHinge)
