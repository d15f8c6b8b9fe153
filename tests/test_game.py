"""The game loop, EXP4.MP's state and theory defaults, OGD, checkpoints."""

from __future__ import annotations

import math

import numpy as np
import pytest

import harness
from harness.game import checkpoint_rounds
from plugins.p_players.exp4mp import Exp4MP
from plugins.sets.kset import KSet
from plugins.w_players.ogd import OGD

from conftest import game_cfg


def _player(n: int, k: int, T: int, **params) -> tuple[Exp4MP, KSet]:
    K = harness.build("constraint_set", "kset", n=n, k=k)
    pp = harness.build("p_player", "exp4mp", **params)
    pp.setup(K, T)
    return pp, K


@pytest.mark.parametrize(("n", "k", "T"), [(569, 20, 500_000), (506, 20, 50_000), (50, 1, 1000)])
def test_exp4mp_defaults_follow_theorem_4_1(n, k, T):
    pp, _ = _player(n, k, T)
    gamma = math.sqrt(n * math.log(n / k) / (k * T))
    assert pp.gamma_ == pytest.approx(gamma, rel=1e-12)
    assert pp.eta_ == pytest.approx(k * gamma / (2 * n), rel=1e-12)
    assert pp.c_ == pytest.approx(math.sqrt(k * math.log(n / 0.05)), rel=1e-12)


def test_exp4mp_defaults_match_the_papers_table_3():
    # Table 3 (Appendix E): eta_p of OL-EXP.4M at N = 1e7, k = 20:
    # 2.43e-4 (cancer), 2.53e-4 (Boston)
    for n, eta_p in ((569, 2.43e-4), (506, 2.53e-4)):
        pp, _ = _player(n, 20, 10**7 // 20)
        assert pp.eta_ == pytest.approx(eta_p, rel=5e-3)


def test_overrides_replace_theory_values():
    pp, _ = _player(100, 10, 1000, eta=0.5, gamma=0.2, c=1.0)
    assert (pp.eta_, pp.gamma_, pp.c_) == (0.5, 0.2, 1.0)


def test_short_horizon_is_refused_with_the_theorem_condition():
    with pytest.raises(harness.ConfigError, match="T >= n log"):
        _player(569, 20, 3)


def _play_rounds(pp: Exp4MP, K: KSet, gains, rounds: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    for t in range(rounds):
        prop = pp.propose(rng)
        assert prop.rows.size == K.k and np.unique(prop.rows).size == K.k
        pp.observe(gains(t)[prop.rows])
        assert K.contains(pp.p, atol=1e-9)
        assert np.all(np.isfinite(pp.log_w_))


def test_p_stays_in_kset_every_round_and_moves_toward_high_losses():
    # seed 0, 3000 rounds: rows 0-4 always lose 1, the others 0; the k = 5 cap
    # means the best action is exactly rows 0-4, so p must concentrate there.
    n, k = 40, 5
    pp, K = _player(n, k, 3000)
    gains = np.zeros(n)
    gains[:k] = 1.0
    _play_rounds(pp, K, lambda t: gains, 3000)
    assert pp.p[:k].sum() > 0.85  # uniform: 0.125; the cap and gamma/n floor allow at most ~0.93
    assert pp.p[:k].min() > pp.p[k:].max()


def test_log_domain_survives_adversarial_switching_gains():
    # huge step: without log weights and rebasing exp() overflows within a few rounds
    n, k = 30, 3
    pp, K = _player(n, k, 100, eta=50.0, gamma=0.05)
    one = np.zeros(n)
    one[0] = 1.0
    _play_rounds(pp, K, lambda t: one if t < 200 else np.roll(one, 7), 400)
    # the weights kept beside the log-weights stay exp of them (relative 1e-12),
    # and the kept bound on the largest log-weight holds and is below 200
    assert np.all(np.isfinite(pp.weights_))
    np.testing.assert_allclose(pp.weights_, np.exp(pp.log_w_raw_), rtol=1e-12, atol=0)
    assert pp.log_w_raw_.max() <= pp.state_.book[0] <= 200.0


@pytest.mark.parametrize(("eta", "confidence"), [(None, "all"), (None, "sampled"), (50.0, "all")])
def test_projection_every_round_is_the_projection_of_the_log_weights(eta, confidence):
    # seed 3, 5000 rounds (past a refresh of the weights at 4096), random
    # losses: each round's p, from the warm-started projection of the weights
    # kept beside the log-weights, is the log-domain projection of the
    # log-weights computed afresh (capped_set_project) to 1e-12; eta = 50 makes
    # gains above 100 (the weights recomputed at once) and capped rows
    from plugins.lib.capped import capped_set_project

    n, k, T = 30, 3, 5000
    pp, K = _player(n, k, T, eta=eta, confidence=confidence)
    rng, losses = np.random.default_rng(3), np.random.default_rng(4)
    capped_seen = 0
    for _ in range(T):
        prop = pp.propose(rng)
        pp.observe(losses.random(k) ** 3)
        want, capped = capped_set_project(pp.set_state_, pp.log_w_, pp.gamma_)
        np.testing.assert_allclose(pp.p, want, rtol=1e-12, atol=1e-15)
        assert np.array_equal(pp.capped_, capped)
        capped_seen += int(capped.sum())
        del prop
    assert capped_seen > 0 or eta is None


@pytest.mark.parametrize("confidence", ["all", "sampled"])
def test_confidence_variants(confidence):
    n, k, T = 30, 3, 500
    pp, K = _player(n, k, T, confidence=confidence)
    rng = np.random.default_rng(1)
    before = pp.log_w_.copy()
    prop = pp.propose(rng)
    p, capped = pp.p.copy(), pp.capped_.copy()
    pp.observe(np.zeros(k))  # zero losses: only the confidence term moves the weights
    bonus = pp.eta_ * pp.c_ / math.sqrt(n * T) / (k * p)
    expected = before.copy()
    if confidence == "all":
        expected[~capped] += bonus[~capped]
    else:
        rows = prop.rows[~capped[prop.rows]]
        expected[rows] += bonus[rows]
    expected -= expected.max()
    np.testing.assert_allclose(pp.log_w_, expected, rtol=0, atol=1e-15)


def _ogd_reference_step(w: np.ndarray, lr: float, radius: float, grad: np.ndarray) -> np.ndarray:
    """Projected OGD in numpy: the step, then the scaling onto the ball."""
    w = w - lr * grad
    norm = np.linalg.norm(w)
    return w * (radius / norm) if norm > radius else w


def test_ogd_kernel_matches_a_numpy_reference():
    # seed 1, d = 7, 200 steps of gradients of norm about 0.3 to 30 (so the
    # projection is active in some steps only): OGD.step, which runs the
    # compiled ogd_step, equals the numpy step to 1e-13 absolute every step
    # (norms differ only in summation order), and w_bar is the mean of the
    # iterates played to 1e-13
    ogd = OGD(radius=1.5)
    ogd.setup(dim=7, horizon=200, grad_bound=1.0)
    rng = np.random.default_rng(1)
    w = np.zeros(7)
    played, projected = [], 0
    for _ in range(200):
        played.append(w)
        grad = rng.normal(size=7) * 10.0 ** rng.uniform(-1.0, 1.0)
        ogd.step(grad)
        w = _ogd_reference_step(w, ogd.lr_, 1.5, grad)
        projected += bool(np.linalg.norm(w) >= 1.5 - 1e-12)
        np.testing.assert_allclose(ogd.w, w, rtol=0, atol=1e-13)
    assert 10 < projected < 190 and ogd.rounds_ == 200
    np.testing.assert_allclose(ogd.w_bar, np.mean(played, axis=0), rtol=0, atol=1e-13)


def test_ogd_stays_in_ball_and_averages_played_iterates():
    ogd = OGD(radius=2.0)
    ogd.setup(dim=3, horizon=100, grad_bound=1.0)
    assert ogd.lr_ == pytest.approx(2.0 * math.sqrt(2 / 100))
    rng = np.random.default_rng(0)
    played = []
    for _ in range(50):
        played.append(ogd.w.copy())
        ogd.step(rng.normal(size=3) * 10)
        assert np.linalg.norm(ogd.w) <= 2.0 + 1e-12
    np.testing.assert_allclose(ogd.w_bar, np.mean(played, axis=0), atol=1e-14)


def test_checkpoints_are_log_spaced_with_decades_and_the_last_round():
    rounds = checkpoint_rounds(500_000, 30, 20)
    steps = rounds * 20
    assert rounds[-1] == 500_000 and np.all(np.diff(rounds) > 0)
    for decade in (100, 1000, 10**4, 10**5, 10**6, 10**7):
        assert decade in steps
    assert 30 <= rounds.size <= 40


def test_game_counts_data_points_and_a_bar_is_in_kset(tmp_path):
    cfg = game_cfg("constraint.k=7", "dataset=boston", f"budget={7 * 3000 + 5}", "seed=2",
                   "checkpoints=4")
    prep = harness.prepare(cfg)
    assert prep.horizon == 3000
    metrics = harness.play(prep)
    assert metrics["data_points"] == 7 * 3000 == prep.context.parts.data_points
    assert metrics["rounds"] == 3000 == prep.context.parts.rounds
    assert prep.parts.constraint.contains(prep.game.state.a_sum / 3000, atol=1e-9)


def test_theory_bound_is_theorem_4_1():
    # Theorem 4.1 (th:topk) in game units at t = T: OGD's regret plus
    # th:EXP4.MP's regret divided by k (it sums the losses of k rows), over T
    cfg = game_cfg(f"budget={20 * 2000}", "checkpoints=2")
    prep = harness.prepare(cfg)
    metrics = harness.play(prep)
    n, k, T, d = 569, 20, 2000, 0.05
    B, s, G = 1.0, math.sqrt(2 / T), prep.parts.model.grad_bound
    regret_w = B * B / (2 * s) + s * G * G * T / 2
    regret_p = (2 * math.sqrt(k * n * T * math.log(n / d))
                + 4 * math.sqrt(k * n * T * math.log(n / k)) + k * math.log(n / d)) / k
    assert metrics["theory_bound"] == pytest.approx((regret_w + regret_p) / T, rel=1e-12)
