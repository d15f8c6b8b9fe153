"""Constraint sets (the p-player's sets K)."""
