"""EXP4.MP (OL-EXP.4M's p-player, Algorithm 2) with ``state="tree"``: the mixed
tree of plugins/p_players/kset_tree.py (``MixedTreeState``) against the dense
state, its draw's marginals, the compiled path, resume, and the refusals.

* Tree and dense (``confidence="sampled"``) fed the same rows and losses give
  the same ``p_t`` to 1e-12 relative every round, with capping, and through
  rebases forced by a small threshold.
* The tree's draw has marginals ``P[i in I_t] = k p_i`` of the mixed ``p``:
  chi-square, 20000 draws, seed 12345, reject at p < 1e-3 (as
  tests/test_kset_tree.py).
* The compiled path equals the Python methods round for round (rows exactly,
  ``p_t`` to 1e-12) through the harness; a run interrupted and resumed ends
  with the metrics of an uninterrupted one.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import harness
from harness import engine
from plugins.p_players.exp4mp import Exp4MP
from plugins.p_players.kset_tree import tree_mixed_sample
from plugins.sets.kset import KSet
from plugins.sets.simplex import Simplex

from conftest import StopAt, game_cfg

#: tree against dense: the largest relative difference of p_t allowed
P_RTOL = 1e-12


def pair(K, horizon: int, **params) -> tuple[Exp4MP, Exp4MP]:
    """The dense and the tree state of exp4mp (confidence="sampled") on one set."""
    dense = Exp4MP(confidence="sampled", state="dense", **params)
    tree = Exp4MP(confidence="sampled", state="tree", **params)
    dense.setup(K, horizon)
    tree.setup(K, horizon)
    return dense, tree


def force_rebases(pp: Exp4MP, above: float) -> None:
    """Rebase the tree whenever its largest weight climbs above ``above``."""
    pp.tree_ = pp.tree_._replace(rebase_above=above)
    pp.state_ = pp.state_._replace(tree=pp.tree_)


def play_pair(dense: Exp4MP, tree: Exp4MP, rounds: int, seed: int) -> dict:
    """The dense state draws (seed ``seed``), both observe the same rows and
    losses (a few rows with high losses, so that rows get capped); the largest
    relative gap of p_t over all rounds, the most rows capped at once, and the
    rounds whose capped sets differ."""
    rng = np.random.default_rng(seed)
    gains = np.random.default_rng(seed + 1)
    level = gains.random(dense.constraint_.n) ** 3
    worst, most_capped, capped_differ = 0.0, 0, 0
    for _ in range(rounds):
        rows = dense.propose(rng).rows
        tree.rows_ = rows.copy()
        losses = np.clip(level[rows] + 0.1 * gains.standard_normal(rows.size), 0.0, 1.0)
        dense.observe(losses)
        tree.observe(losses)
        pd, pt = dense.p, tree.p
        worst = max(worst, float(np.max(np.abs(pt - pd) / pd)))
        most_capped = max(most_capped, int(tree.tree_.tree.n_capped[0]))
        capped_differ += not np.array_equal(np.flatnonzero(tree.tree_.is_capped),
                                            np.flatnonzero(dense.capped_))
    return {"worst_rel": worst, "most_capped": most_capped, "capped_differ": capped_differ}


def test_tree_reproduces_the_dense_state():
    # n = 300, k = 7, eta = gamma = 0.05 (larger than the theory values, so
    # that rows get capped soon), 500 rounds, seeds 1 and 2; p_t to 1e-12
    # relative every round (measured 4e-14), the same capped set every round
    dense, tree = pair(KSet(300, 7, sampler="systematic"), 500, eta=0.05, gamma=0.05)
    out = play_pair(dense, tree, 500, seed=1)
    assert out["most_capped"] >= 3, out  # the projection capped rows along the way
    assert out["capped_differ"] == 0, out
    assert out["worst_rel"] <= P_RTOL, out
    assert tree.tree_.tree.rebases[0] == 0


def test_tree_reproduces_the_dense_state_through_rebases():
    # as above (seeds 3 and 4) with a rebase each time the largest weight
    # climbs above exp(0.5) instead of exp(200): 500 rounds, at least 10 rebases
    # (measured 16), p_t to 1e-12 relative (measured 2e-14)
    dense, tree = pair(KSet(300, 7, sampler="systematic"), 500, eta=0.05, gamma=0.05)
    force_rebases(tree, math.exp(0.5))
    out = play_pair(dense, tree, 500, seed=3)
    assert tree.tree_.tree.rebases[0] >= 10, tree.tree_.tree.rebases[0]
    assert out["most_capped"] >= 3, out
    assert out["capped_differ"] == 0, out
    assert out["worst_rel"] <= P_RTOL, out


def test_tree_reproduces_the_dense_state_on_the_simplex():
    # k = 1 (the simplex: one cap of 1, never reached), n = 200, theory
    # parameters for T = 2000, 2000 rounds, seeds 5 and 6; p_t to 1e-12 relative
    dense, tree = pair(Simplex(200), 2000)
    out = play_pair(dense, tree, 2000, seed=5)
    assert out["worst_rel"] <= P_RTOL, out


@pytest.mark.parametrize(("n", "k", "gamma"), [(30, 5, 0.3), (40, 8, 0.1), (25, 3, 0.2)])
def test_tree_draw_marginals_are_k_p(n, k, gamma):
    # 200 rounds (seed 7, high losses on rows 0 and 1, so they are capped at
    # k p_i = 1) put the tree at a capped, mixed p; then N_DRAWS draws of the
    # tree (seed SEED) against k p by the chi-square test of test_kset_tree.
    # A draw from q (without the gamma mixing) fails it.
    from test_kset_tree import N_DRAWS, P_THRESHOLD, SEED, marginal_pvalue

    pp = Exp4MP(confidence="sampled", state="tree", eta=0.2, gamma=gamma)
    pp.setup(KSet(n, k, sampler="systematic"), 1000)
    rng = np.random.default_rng(7)
    for _ in range(200):
        rows = pp.propose(rng).rows
        pp.observe(np.where(rows < 2, 1.0, 0.05 * rng.random(rows.size)))
    p = pp.p
    assert np.sum(k * p >= 1.0 - 1e-12) >= 1  # capped rows: in every draw
    assert np.all(k * p[k * p < 1.0 - 1e-12] > gamma * k / n - 1e-15)
    draws = [tree_mixed_sample(pp.tree_, np.random.default_rng([SEED, t])).copy()
             for t in range(N_DRAWS)]
    assert marginal_pvalue(draws, p, k) >= P_THRESHOLD


TREE = ["constraint=kset", "constraint.k=5", "constraint.sampler=systematic",
        "p_player=exp4mp", "p_player.confidence=sampled", "p_player.state=tree"]


@pytest.mark.parametrize("data", ["breast_cancer", "boston"])
def test_compiled_path_gives_the_numbers_of_the_python_methods(data):
    # seed 3 (test_engine's _play), 400 rounds traced one by one, then the
    # checkpoints of 2e4 data points: the rows of every traced round equal,
    # p_t and w_bar to 1e-12, every metric but the timings to 1e-12
    from test_engine import _play

    over = [*TREE, f"dataset={data}"]
    python = _play(over, "python", rounds_traced=400, budget=20000)
    compiled = _play(over, "compiled", rounds_traced=400, budget=20000)
    assert python.path == "python" and compiled.path == "compiled"
    assert python.parts.p_player.tree_ is not None
    assert len(python.trace) == len(compiled.trace) > 400
    previous = None
    for (t, a_py, p_py, w_py, _), (t2, a_c, p_c, w_c, _) in zip(
            python.trace, compiled.trace, strict=True):
        assert t == t2
        if t <= 400:
            step_py = a_py - (0 if previous is None else previous[0])
            step_c = a_c - (0 if previous is None else previous[1])
            np.testing.assert_array_equal(np.flatnonzero(step_py), np.flatnonzero(step_c),
                                          err_msg=f"rows of round {t}")
        np.testing.assert_allclose(p_c, p_py, rtol=0, atol=1e-12, err_msg=f"p at {t}")
        np.testing.assert_allclose(w_c, w_py, rtol=0, atol=1e-12, err_msg=f"w_bar at {t}")
        previous = (a_py, a_c)
    for m_py, m_c in zip(python.metrics, compiled.metrics, strict=True):
        for key in m_py:
            if key not in harness.game.TIMING_METRICS:
                assert m_c[key] == pytest.approx(m_py[key], rel=0, abs=1e-12), key


def test_auto_picks_the_tree_where_it_applies():
    cases = {
        ("confidence=sampled", "constraint.sampler=systematic"): "tree",
        ("confidence=sampled", "constraint.sampler=depround"): "dense",
        ("confidence=all", "constraint.sampler=systematic"): "dense",
    }
    for (conf, sampler), want in cases.items():
        prep = harness.prepare(game_cfg("constraint.k=5", sampler, "p_player=exp4mp",
                                        f"p_player.{conf}", "budget=20000"))
        pp = prep.parts.p_player
        assert pp.state_name_ == want, (conf, sampler)
        assert (pp.tree_ is not None) == (want == "tree")
        form = engine.forms(prep.parts)
        assert isinstance(form, engine.Forms), form
    simplex = harness.prepare(game_cfg("constraint=simplex", "p_player=exp4mp",
                                       "p_player.confidence=sampled", "budget=20000"))
    assert simplex.parts.p_player.state_name_ == "tree"


def test_tree_with_confidence_all_is_refused():
    cfg = game_cfg("constraint.k=5", "constraint.sampler=systematic", "p_player=exp4mp",
                   "p_player.state=tree", "budget=20000")
    with pytest.raises(harness.ConfigError) as err:
        harness.prepare(cfg)
    message = str(err.value)
    for part in ("'state'", "'tree'", "'confidence'", "'sampled'", "'all'",
                 "p_player.confidence=sampled", "p_player.state=dense"):
        assert part in message, (part, message)


def test_tree_with_depround_or_an_alphaset_is_refused():
    cfg = game_cfg("constraint.k=5", "p_player=exp4mp", "p_player.confidence=sampled",
                   "p_player.state=tree", "budget=20000")
    with pytest.raises(harness.ConfigError, match="constraint.sampler=systematic"):
        harness.prepare(cfg)
    pp = Exp4MP(confidence="sampled", state="tree")
    alpha = harness.build("constraint_set", "alphaset", n=12, k=4,
                          caps={"rows": [1, 2, 1, 4] * 3})
    with pytest.raises(harness.ConfigError, match="'state' parameter of exp4mp"):
        pp.setup(alpha, 5000)


def test_regret_bound_is_none_with_the_tree():
    # the proof (Appendix C) covers confidence="all" only
    pp = Exp4MP(confidence="sampled", state="tree")
    pp.setup(KSet(569, 20, sampler="systematic"), 50_000)
    assert pp.regret_bound(50_000) is None


def test_an_interrupted_tree_run_resumes_to_identical_numbers(tmp_path, monkeypatch):
    # seed 3, 6000 data points on breast cancer, 8 checkpoints, the state saved
    # at every one; interrupted after the 5th checkpoint, resumed: the final
    # metrics equal an uninterrupted run's exactly (wall time aside), on the
    # compiled path (the default) and on the Python loop
    from harness import api

    monkeypatch.setattr(api, "SAVE_EVERY_S", 0.0)


    def untimed(metrics):
        return {k: v for k, v in metrics.items() if k not in harness.game.TIMING_METRICS}

    for path in ("compiled", "python"):
        cfg = game_cfg(*TREE, "budget=6000", "seed=3", "checkpoints=8", "resume=true",
                       f"state_dir={tmp_path / path}", "tracking.enabled=false",
                       f"engine={path}")
        reference = harness.run({**cfg, "resume": False})
        with pytest.raises(KeyboardInterrupt):
            harness.run(cfg, plugins=[StopAt(5)])
        assert list((tmp_path / path).glob("state-*.pkl"))
        assert untimed(harness.run(cfg)) == untimed(reference), path
