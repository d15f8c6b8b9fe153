"""The paper's models (plugins/models/glm.py): gradients, the declared loss scale as
a bound on the l2-ball, clipping with a user-set scale, task metrics."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

import harness
from plugins.models.glm import BLAS_ROWS

MODELS = ["linear_mse", "logistic_cel"]


def tiny_dataset(model: str, n: int, d: int, rng: np.random.Generator, n_classes: int = 3):
    """A dataset-like object: X in [0, 1]^d, y in [0, 1] or in {0, ..., C-1}."""
    X = rng.random((n, d))
    if model == "linear_mse":
        return SimpleNamespace(X=X, y=rng.random(n), n_classes=0, task="regression")
    return SimpleNamespace(X=X, y=rng.integers(0, n_classes, size=n), n_classes=n_classes,
                           task="classification")


def built(model: str, data, radius: float, **params):
    m = harness.build("model", model, **params)
    m.setup(data, radius)
    return m


def random_in_ball(rng: np.random.Generator, dim: int, radius: float) -> np.ndarray:
    w = rng.normal(size=dim)
    return w * (radius * rng.uniform(0.1, 1.0) / np.linalg.norm(w))


def central_diff(f, w: np.ndarray, h: float) -> np.ndarray:
    g = np.empty_like(w)
    for j in range(w.size):
        e = np.zeros_like(w)
        e[j] = h
        g[j] = (f(w + e) - f(w - e)) / (2.0 * h)
    return g


# Finite differences: central, step h = 1e-5; truncation O(h^2 |f'''|) ~ 1e-10 and
# rounding ~1e-16 / h ~ 1e-11 for these O(1) functions, so the relative
# tolerance 1e-6 on ||grad - fd|| / ||grad|| has plenty of room yet catches
# any wrong factor, sign or missing term (those give relative errors >= 1e-2).
FD_STEP = 1e-5
FD_RTOL = 1e-6


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("seed", range(4))
def test_gradients_match_central_differences(model, seed):
    # seed s: n = 25 rows, d = 4, 3 classes, radius 2, random weights >= 0
    rng = np.random.default_rng(seed)
    data = tiny_dataset(model, 25, 4, rng)
    m = built(model, data, radius=2.0)
    X, y = data.X, data.y
    a = rng.random(25)
    for _ in range(3):
        w = random_in_ball(rng, m.n_params, 2.0)

        def f(v, m=m, a=a):
            return float(a @ m.losses(v, X, y))

        g = m.grad(w, X, y, a)
        fd = central_diff(f, w, FD_STEP)
        assert np.linalg.norm(g - fd) <= FD_RTOL * np.linalg.norm(g)

        value, g2 = m.value_and_grad(w, X, y, a)
        assert value == pytest.approx(f(w), rel=1e-12)
        fd2 = central_diff(lambda v, m=m, a=a: m.value_and_grad(v, X, y, a)[0], w, FD_STEP)
        assert np.linalg.norm(g2 - fd2) <= FD_RTOL * np.linalg.norm(g2)
        np.testing.assert_allclose(g2, g, rtol=1e-12, atol=1e-15)
    assert m.n_clipped == 0


@pytest.mark.parametrize("n", [15, 3 * BLAS_ROWS])
def test_gradients_match_independent_formulas(n):
    # closed forms written here from scratch: linear 2 a_i r_i (x_i, 1),
    # softmax (softmax(z_i) - e_{y_i}) (x_i, 1)^T; seed 11, tolerance 1e-12;
    # n = 15 takes the kernels' loops, 3 * BLAS_ROWS their BLAS path
    rng = np.random.default_rng(11)
    d, C = 3, 4
    X = rng.random((n, d))
    Xt = np.hstack((X, np.ones((n, 1))))
    a = rng.random(n)

    reg = SimpleNamespace(X=X, y=rng.random(n), n_classes=0, task="regression")
    m = built("linear_mse", reg, 1.5)
    w = random_in_ball(rng, m.n_params, 1.5)
    r = Xt @ w - reg.y
    np.testing.assert_allclose(m.raw_losses(w, X, reg.y), r * r, rtol=1e-12)
    np.testing.assert_allclose(m.grad(w, X, reg.y, a) * m.scale_, Xt.T @ (2 * a * r),
                               rtol=1e-12, atol=1e-14)

    cls = SimpleNamespace(X=X, y=rng.integers(0, C, n), n_classes=C, task="classification")
    m = built("logistic_cel", cls, 1.5)
    w = random_in_ball(rng, m.n_params, 1.5)
    W = w.reshape(C, d + 1)
    Z = Xt @ W.T
    P = np.exp(Z) / np.exp(Z).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(m.raw_losses(w, X, cls.y), -np.log(P[np.arange(n), cls.y]),
                               rtol=1e-12)
    G = P.copy()
    G[np.arange(n), cls.y] -= 1.0
    np.testing.assert_allclose(m.grad(w, X, cls.y, a) * m.scale_, ((G * a[:, None]).T @ Xt).ravel(),
                               rtol=1e-12, atol=1e-14)


# ---------------------------------------------------------------------------
# the declared scale bounds the loss on the ball
# ---------------------------------------------------------------------------

REAL = {"breast_cancer": "logistic_cel", "boston": "linear_mse"}


@pytest.fixture(scope="module")
def real_data():
    return {name: harness.build("dataset", name) for name in REAL}


def worst_direction_per_row(model, X, y, radius: float) -> np.ndarray:
    """For each row, the w on the sphere ||w|| = radius maximising that row's loss.

    Linear: |<w, (x,1)> - y| is largest at w = -B (x,1)/||(x,1)|| (y >= 0).
    Softmax: the loss grows with z_c - z_y = <w_c - w_y, (x,1)> <= sqrt(2) B ||(x,1)||,
    attained at w_c = -w_y = (B / sqrt 2) (x,1)/||(x,1)|| for any c != y.
    """
    Xt = np.hstack((X, np.ones((X.shape[0], 1))))
    u = Xt / np.linalg.norm(Xt, axis=1, keepdims=True)
    if model.name == "linear_mse":
        assert np.all(y >= 0)
        return -radius * u
    C = model.C_
    out = np.zeros((X.shape[0], C, Xt.shape[1]))
    rows = np.arange(X.shape[0])
    other = (y + 1) % C
    out[rows, y] = -radius / math.sqrt(2.0) * u
    out[rows, other] = radius / math.sqrt(2.0) * u
    return out.reshape(X.shape[0], -1)


@pytest.mark.parametrize("radius", [0.5, 1.0, 3.0, 10.0])
@pytest.mark.parametrize("name", list(REAL))
def test_losses_in_unit_interval_on_the_ball(real_data, name, radius):
    data = real_data[name]
    m = built(REAL[name], data, radius)
    X, y = data.X, data.y
    assert not m.clips_
    # 1) the per-row worst case: every row's loss maximised over the sphere
    worst = worst_direction_per_row(m, X, y, radius)
    np.testing.assert_allclose(np.linalg.norm(worst, axis=1), radius, rtol=1e-12)
    row_max = np.empty(X.shape[0])
    for i, w in enumerate(worst):
        losses = m.losses(w, X, y)  # all rows at this w, not only row i
        assert losses.min() >= 0.0 and losses.max() <= 1.0
        row_max[i] = losses[i]
    # the worst direction is adversarial indeed: it attains most of the bound
    assert row_max.max() >= 0.8  # measured 0.81-0.99 of the bound
    # 2) 300 random directions (seed 0) scaled to the sphere, and inside the ball
    rng = np.random.default_rng(0)
    for _ in range(300):
        w = rng.standard_cauchy(size=m.n_params)  # heavy-tailed: some near-axis directions
        w *= radius / np.linalg.norm(w)
        for scale in (1.0, 0.3):
            losses = m.losses(scale * w, X, y)
            assert losses.min() >= 0.0 and losses.max() <= 1.0
    assert m.n_clipped == 0


@pytest.mark.parametrize("name", list(REAL))
def test_worst_direction_is_the_row_maximum(real_data, name):
    # the closed-form worst direction of row i is not beaten by local search:
    # 200 random perturbations (seed 1) projected back to the sphere
    data = real_data[name]
    radius = 1.0
    m = built(REAL[name], data, radius)
    X, y = data.X, data.y
    Xt = np.hstack((X, np.ones((X.shape[0], 1))))
    i = int(np.argmax(np.linalg.norm(Xt, axis=1)))
    w_star = worst_direction_per_row(m, X[i:i + 1], y[i:i + 1], radius)[0]
    best = m.raw_losses(w_star, X[i:i + 1], y[i:i + 1])[0]
    rng = np.random.default_rng(1)
    for _ in range(200):
        w = w_star + 0.05 * rng.normal(size=w_star.size)
        w *= radius / np.linalg.norm(w)
        assert m.raw_losses(w, X[i:i + 1], y[i:i + 1])[0] <= best + 1e-12
    assert best <= m.loss_bound


def test_declared_bound_is_the_documented_formula(real_data):
    for name, model in REAL.items():
        data = real_data[name]
        R = math.sqrt(float(np.max(np.sum(data.X**2, axis=1))) + 1.0)
        m = built(model, data, 2.0)
        if model == "linear_mse":
            bound = (2.0 * R + float(np.max(np.abs(data.y)))) ** 2
        else:
            bound = math.log(data.n_classes) + math.sqrt(2.0) * 2.0 * R
        assert m.loss_bound == pytest.approx(bound, rel=1e-12)
        assert m.scale_ == m.loss_bound


# ---------------------------------------------------------------------------
# clipping with a user-set scale
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("rows", [40, 3 * BLAS_ROWS])
@pytest.mark.parametrize("model", MODELS)
def test_user_scale_clips_at_one_and_counts(model, rows):
    # seed 4: 40 rows (the kernels' loops) or 3 * BLAS_ROWS (their BLAS path),
    # radius 3; scale = 0.3 * the proven bound
    rng = np.random.default_rng(4)
    data = tiny_dataset(model, rows, 3, rng, n_classes=2)
    ref = built(model, data, 3.0)
    scale = 0.3 * ref.loss_bound
    m = built(model, data, 3.0, loss_scale=scale)
    assert m.clips_ and m.scale_ == scale and m.n_clipped == 0
    X, y = data.X, data.y

    total = 0
    seen_clipped = seen_free = False
    for _ in range(20):
        w = rng.normal(size=m.n_params)
        w *= 3.0 / np.linalg.norm(w)
        raw = m.raw_losses(w, X, y)
        over = raw / scale > 1.0
        before = m.n_clipped
        out = m.losses(w, X, y)
        assert m.n_clipped - before == int(over.sum())
        total += int(over.sum())
        assert np.all(out[over] == 1.0)
        # losses() is the compiled kernel (a loop), raw_losses numpy (BLAS): the dot
        # products round differently, up to about 1e-14 relative on small residuals
        np.testing.assert_allclose(out[~over], raw[~over] / scale, rtol=1e-12)
        assert out.max() <= 1.0

        a = rng.random(rows)
        g = m.grad(w, X, y, a)
        # clipped rows contribute nothing: same as the gradient over the free rows only
        g_free = ref.grad(w, X[~over], y[~over], a[~over]) * ref.scale_ / scale
        np.testing.assert_allclose(g, g_free, rtol=1e-12, atol=1e-15)
        # and each clipped row alone has a zero gradient
        for i in np.flatnonzero(over)[:3]:
            assert np.all(m.grad(w, X[i:i + 1], y[i:i + 1], np.ones(1)) == 0.0)
        # finite differences of the clipped objective agree (when no row sits at the kink)
        if np.min(np.abs(raw / scale - 1.0)) > 1e-3:
            n_before = m.n_clipped
            fd = central_diff(lambda v, m=m, a=a: float(a @ m.losses(v, X, y)), w, FD_STEP)
            m.n_clipped = n_before
            assert np.linalg.norm(g - fd) <= FD_RTOL * max(np.linalg.norm(g), 1e-12)
        seen_clipped |= bool(over.any())
        seen_free |= bool((~over).any())
    assert seen_clipped and seen_free
    assert m.n_clipped == total > 0
    # value_and_grad is never clipped (the game's inner problem stays convex)
    value, _ = m.value_and_grad(w, X, y, np.ones(rows))
    assert value == pytest.approx(float(np.sum(raw)) / scale, rel=1e-12)


def test_default_scale_never_clips():
    rng = np.random.default_rng(5)
    data = tiny_dataset("linear_mse", 30, 3, rng)
    m = built("linear_mse", data, 1.0)
    assert not m.clips_
    w = random_in_ball(rng, m.n_params, 1.0)
    m.losses(w, data.X, data.y)
    assert m.n_clipped == 0


def test_loss_scale_validation():
    for bad in (0.0, -1.0, "x"):
        with pytest.raises(harness.ConfigError, match="'loss_scale' parameter of linear_mse"):
            harness.build("model", "linear_mse", loss_scale=bad)


# ---------------------------------------------------------------------------
# task metrics
# ---------------------------------------------------------------------------


def test_accuracy_on_a_separable_toy_set():
    X = np.array([[0.0], [0.1], [0.2], [0.8], [0.9], [1.0]])
    y = np.array([0, 0, 0, 1, 1, 1])
    data = SimpleNamespace(X=X, y=y, n_classes=2, task="classification")
    m = built("logistic_cel", data, 10.0)
    # logit_1 - logit_0 = 10 (x - 0.5): the separating rule x > 0.5
    w = np.array([[-2.5, 1.25], [2.5, -1.25]]).ravel()
    metrics = m.task_metrics(w, X, y, 2)
    assert metrics["accuracy"] == 1.0
    assert metrics["accuracy"] == float(np.mean((X[:, 0] > 0.5) == y))
    raw = m.raw_losses(w, X, y)
    assert metrics["max_loss"] == pytest.approx(raw.max(), rel=1e-12)
    assert metrics["mean_loss"] == pytest.approx(raw.mean(), rel=1e-12)
    assert m.task_metrics(-w, X, y, 2)["accuracy"] == 0.0
    # logit_1 - logit_0 = 5 x - 0.75: threshold 0.15, so the row x = 0.2 is misclassified
    shifted = w.reshape(2, 2).copy()
    shifted[1, 1] += 1.75
    assert m.task_metrics(shifted.ravel(), X, y, 2)["accuracy"] == pytest.approx(5 / 6)


@pytest.mark.parametrize("k", [1, 3, 7, 20])
def test_topk_mse_is_mean_of_k_largest_squared_errors(k):
    # seed 6: 20 rows, d = 3, w in the unit ball
    rng = np.random.default_rng(6)
    data = tiny_dataset("linear_mse", 20, 3, rng)
    m = built("linear_mse", data, 1.0)
    w = random_in_ball(rng, m.n_params, 1.0)
    sq = (data.X @ w[:-1] + w[-1] - data.y) ** 2
    metrics = m.task_metrics(w, data.X, data.y, k)
    assert metrics["topk_mse"] == pytest.approx(np.sort(sq)[-k:].mean(), rel=1e-12)
    assert metrics["max_loss"] == pytest.approx(sq.max(), rel=1e-12)
    assert metrics["mean_loss"] == pytest.approx(sq.mean(), rel=1e-12)
