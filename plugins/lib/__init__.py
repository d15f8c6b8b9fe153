"""Numerics two kinds of built-in plugin share: the capped simplices' sets and
projections (``capped``: the sets and the p-players), the step rules
(``steps``: the players and the solvers) and the vectorising ``exp``/``log``,
the ball projection and the row-norm scan (``vecmath``). These modules are not
plugins: nothing here is registered."""
