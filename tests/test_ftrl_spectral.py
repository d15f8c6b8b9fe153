"""OL-FTRL, the game's full-information p-player, on the spectral sets held to
the exact OPT of the paper's problem (mu = nu = 0 in the ball: the only problem
the game solves), on yacht's training split (246 rows: the conic form of OPT has
246 levels x 246 rows). This checks the run end to end: OPT, the certified gap
and the theorem's bound agree. The player's projection itself (the KL
projection onto P(sigma)) is held to cvxpy in tests/test_spectral_set.py: at
this budget the w-player limits the suboptimality, and a player stuck at the
uniform point 1/n (inside every P(sigma)) ends only 5 % higher on extremile."""

from __future__ import annotations

import pytest

import harness

from conftest import game_cfg


@pytest.mark.parametrize("risk", ["superquantile", "extremile", "esrm"])
def test_ftrl_on_a_spectral_set_approaches_the_exact_opt_within_its_certified_gap(risk):
    # seed 0, 406 rounds of 246 rows; the level 0.45 makes the superquantile's
    # boundary weight fractional (not the k-set)
    cfg = game_cfg("dataset=yacht", "dataset.split=train", "constraint=spectral",
                   f"constraint.risk={risk}", "constraint.level=0.45", "p_player=ftrl",
                   "budget=100000", "checkpoints=3", "reference.exact=true")
    prep = harness.prepare(cfg)
    metrics = harness.play(prep)
    params = prep.context.params
    sub, gap = metrics["suboptimality"], metrics["dual_gap"]
    # the certified gap bounds F(w_bar) - OPT, and the theorem's bound the gap
    # (1e-9: OPT's certified interval is narrower than that)
    assert -1e-9 <= sub <= gap + 1e-9, (sub, gap)
    assert gap <= metrics["theory_bound"]
    # the player moved the model well below w = 0's suboptimality (extremile: 0.0039
    # against 0.0132 measured at this budget)
    trivial = float(params["trivial_objective"]) - float(params["opt_lower"])
    assert sub <= 0.5 * trivial, (sub, trivial)
