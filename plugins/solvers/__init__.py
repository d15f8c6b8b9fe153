"""Solvers: the game and the field's direct solvers of the minimax problem."""
