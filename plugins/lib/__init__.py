"""Libraries the built-in plugins share: the numerics of the capped simplices
(``capped``), the O(k log n) k-set state (``kset_tree``) and the exact optimum
(``optimum``). These modules are not plugins: nothing here is registered, and
``harness.registry.DEFAULT_PLUGINS`` does not list them."""
