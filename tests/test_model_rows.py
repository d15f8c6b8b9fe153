"""What a solver reads of a model (``harness.protocols.Model``), for the built-in
models and for a third party's (``tests/third_party/mmb_toy_models``: Huber
regression in numpy only, a one-vs-rest squared hinge with a compiled form):
the row roles of the compiled forms against the batch methods, per-row
gradients against finite differences, ``row_smoothness`` and ``row_grad_bound``
as valid (and attained) constants, and the toy models' exact OPT."""

from __future__ import annotations

import importlib
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import harness
from harness.registry import default_registry
from plugins.models.glm import BLAS_ROWS, ModelState

sys.path.insert(0, str(Path(__file__).parent / "third_party"))
import mmb_toy_models  # noqa: E402

REGISTRY = harness.Registry(harness.make_plugin_manager([mmb_toy_models],
                                                        load_entrypoints=False))

#: (label, registered name, parameters); n_classes 0 for regression
CASES = {
    "linear_mse": ("linear_mse", {}),
    "linear_mse_nobias": ("linear_mse", {"bias": False}),
    "logistic_cel": ("logistic_cel", {}),
    "huber_linear": ("huber_linear", {"delta": 0.3}),
    "ovr_squared_hinge": ("ovr_squared_hinge", {}),
}
COMPILED = ["linear_mse", "linear_mse_nobias", "logistic_cel", "ovr_squared_hinge"]
GUARD = 4  # floats after z and g that a row kernel must leave alone


def problem(label: str, n: int, seed: int, d: int = 4, n_classes: int = 3, radius: float = 2.0):
    """A set-up model and its data: X in [0, 1]^d, y in [0, 2] or in {0, .., C-1}."""
    name, params = CASES[label]
    rng = np.random.default_rng(seed)
    X = rng.random((n, d))
    model = REGISTRY.build("model", name, **params)
    if model.task == "regression":
        data = SimpleNamespace(X=X, y=2.0 * rng.random(n), n_classes=0, task="regression")
    else:
        data = SimpleNamespace(X=X, y=rng.integers(0, n_classes, n), n_classes=n_classes,
                               task="classification")
    model.setup(data, radius)
    return model, data, rng


def row_roles(model):
    """``(loss, grad)`` of one row, ``(i, w) -> (float, array)``: the compiled row
    roles where the model has a compiled form (z and g checked for writes past
    their ends), else ``value_and_grad`` on the row (what a solver does)."""
    make = getattr(model, "compiled", None)
    form = make() if make is not None else None
    if form is None:
        def python_row(X, y, i, w):
            return model.value_and_grad(w, X[i:i + 1], y[i:i + 1], np.ones(1))
        return python_row
    module, _, prefix = form.kernels.partition(":")
    kernels = importlib.import_module(module)
    row_loss, row_grad, row_scratch = (getattr(kernels, f"{prefix}_row_{role}")
                                       for role in ("loss", "grad", "scratch"))
    ms = form.state
    size = int(row_scratch(ms))
    assert size >= 1

    def compiled_row(X, y, i, w):
        X = np.ascontiguousarray(X, dtype=np.float64)
        y = np.ascontiguousarray(y, dtype=np.float64)  # class codes as floats
        zbuf = np.full(size + GUARD, 7.25)
        gbuf = np.full(model.n_params + GUARD, 7.25)
        loss = row_loss(ms, X, y, i, w, zbuf[:size])
        row_grad(ms, X, y, i, w, zbuf[:size], gbuf[:model.n_params])
        assert np.all(zbuf[size:] == 7.25) and np.all(gbuf[model.n_params:] == 7.25)
        return float(loss), gbuf[:model.n_params].copy()

    return compiled_row


def random_w(rng, dim: int, radius: float) -> np.ndarray:
    w = rng.normal(size=dim)
    return w * (radius * rng.uniform(0.1, 1.0) / np.linalg.norm(w))


# ---------------------------------------------------------------------------
# row roles against the batch methods
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("n", [12, 3 * BLAS_ROWS])
@pytest.mark.parametrize("label", COMPILED)
def test_row_roles_agree_with_the_batch_methods(label, n):
    # seed 0, d = 4, 3 classes, radius 2, 3 points w; n = 12 takes the batch
    # kernels' loops (the row's arithmetic is the same code: equal bits),
    # 3 * BLAS_ROWS their BLAS path (rtol 1e-12); gradients against the
    # one-row value_and_grad and grad (numpy or the batch kernel) at rtol 1e-12,
    # atol 1e-15
    model, data, rng = problem(label, n, seed=0)
    rows = row_roles(model)
    for _ in range(3):
        w = random_w(rng, model.n_params, 2.0)
        batch = model.losses(w, data.X, data.y)
        for i in range(n):
            loss, g = rows(data.X, data.y, i, w)
            if n < BLAS_ROWS:
                assert loss == batch[i]
            else:
                assert loss == pytest.approx(batch[i], rel=1e-12)
            value, g_ref = model.value_and_grad(w, data.X[i:i + 1], data.y[i:i + 1], np.ones(1))
            assert loss == pytest.approx(value, rel=1e-12)
            np.testing.assert_allclose(g, g_ref, rtol=1e-12, atol=1e-15)
            g_batch = model.grad(w, data.X[i:i + 1], data.y[i:i + 1], np.ones(1))
            np.testing.assert_allclose(g, g_batch, rtol=1e-12, atol=1e-15)
    assert model.n_clipped == 0


@pytest.mark.parametrize("label", ["linear_mse", "logistic_cel"])
def test_whole_data_numpy_path_agrees_with_the_row_kernels(label):
    # seed 1, n = 3 * BLAS_ROWS, random weights: the numpy methods over all rows
    # (raw_losses / scale_, value_and_grad: BLAS, what full_batch and OPT read)
    # equal the row kernels' losses and their weighted sum of gradients at
    # rtol 1e-12 (atol 1e-14 on the gradient)
    n = 3 * BLAS_ROWS
    model, data, rng = problem(label, n, seed=1)
    rows = row_roles(model)
    weights = rng.random(n)
    for _ in range(2):
        w = random_w(rng, model.n_params, 2.0)
        value, grad = model.value_and_grad(w, data.X, data.y, weights)
        raw = model.raw_losses(w, data.X, data.y) / model.scale_
        total, g_sum = 0.0, np.zeros(model.n_params)
        for i in range(n):
            loss, g = rows(data.X, data.y, i, w)
            assert loss == pytest.approx(raw[i], rel=1e-12)
            total += weights[i] * loss
            g_sum += weights[i] * g
        assert value == pytest.approx(total, rel=1e-12)
        np.testing.assert_allclose(grad, g_sum, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("label", ["linear_mse", "logistic_cel"])
def test_row_roles_are_never_clipped(label):
    # a user-set scale of 0.05 x the proven bound clips most batch losses (seed 3,
    # radius 2 on the sphere); the row roles return raw / scale above 1 and leave
    # the clip count alone, and their gradient is the unclipped one (rtol 1e-12)
    ref, data, rng = problem(label, 20, seed=3)
    name, params = CASES[label]
    model = REGISTRY.build("model", name, **params, loss_scale=0.05 * ref.loss_bound)
    model.setup(data, 2.0)
    rows = row_roles(model)
    w = rng.normal(size=model.n_params)
    w *= 2.0 / np.linalg.norm(w)
    raw = model.raw_losses(w, data.X, data.y)
    assert np.sum(raw / model.scale_ > 1.0) >= 5
    for i in range(20):
        loss, g = rows(data.X, data.y, i, w)
        assert loss == pytest.approx(raw[i] / model.scale_, rel=1e-12)
        _, g_ref = model.value_and_grad(w, data.X[i:i + 1], data.y[i:i + 1], np.ones(1))
        np.testing.assert_allclose(g, g_ref, rtol=1e-12, atol=1e-15)
        assert np.linalg.norm(g) > 0.0
    assert model.n_clipped == 0


def test_compiled_state_is_a_named_tuple():
    for label in ("linear_mse", "logistic_cel"):
        model, _, _ = problem(label, 10, seed=0)
        ms = model.compiled().state
        assert isinstance(ms, ModelState)
        assert ms.scale == model.scale_ and ms.clips is False
        assert ms.classes == (3 if label == "logistic_cel" else 1)
        assert ms.clipped.dtype == np.int64 and ms.fresh[0] == -1


# ---------------------------------------------------------------------------
# gradients, smoothness and gradient bounds of single rows
# ---------------------------------------------------------------------------

# central differences, step 1e-5: truncation O(h^2 |f'''|) ~ 1e-10 (Huber and the
# squared hinge are piecewise quadratic: exact unless a kink lies within h of
# w, which these seeds avoid), rounding ~1e-16 / h; relative tolerance 1e-6
FD_STEP = 1e-5
FD_RTOL = 1e-6


@pytest.mark.parametrize("label", list(CASES))
def test_row_gradients_match_central_differences(label):
    # seed 1, 8 rows, 2 points w in the ball of radius 2, each row alone
    model, data, rng = problem(label, 8, seed=1)
    rows = row_roles(model)
    for _ in range(2):
        w = random_w(rng, model.n_params, 2.0)
        for i in range(8):
            _, g = rows(data.X, data.y, i, w)
            fd = np.empty_like(w)
            for j in range(w.size):
                e = np.zeros_like(w)
                e[j] = FD_STEP
                fd[j] = (rows(data.X, data.y, i, w + e)[0]
                         - rows(data.X, data.y, i, w - e)[0]) / (2.0 * FD_STEP)
            assert np.linalg.norm(g - fd) <= FD_RTOL * np.linalg.norm(g)


def extremal_pair(label: str, model, X, y):
    """Two points and a row where the row gradient's change attains the smoothness
    constant (up to the step's curvature): along the row of largest norm ``x'``,
    where each model's Hessian is largest (module docstrings of the models)."""
    i = int(np.argmax(np.sum(X * X, axis=1)))
    xt = np.append(X[i], 1.0)
    if label == "linear_mse_nobias":
        xt = X[i].copy()
    u = xt / np.linalg.norm(xt)
    t = 1e-4
    if label in ("linear_mse", "linear_mse_nobias"):
        a = np.zeros(model.n_params)
        return a, a + t * u, i
    if label == "huber_linear":  # residual 0 at a: the quadratic piece
        a = np.zeros(model.n_params)
        a[-1] = y[i]
        return a, a + t * u, i
    C, D = model.C_, X.shape[1] + 1
    direction = np.zeros((C, D))
    if label == "logistic_cel":  # p = 1/C at w = 0; diag(p) - pp^T's top eigenvector e_0 - e_1
        assert C == 2
        direction[0], direction[1] = u / math.sqrt(2.0), -u / math.sqrt(2.0)
    else:  # squared hinge at w = 0: every class active, Hessian 2 I kron x'x'^T
        direction[0] = u
    a = np.zeros(model.n_params)
    return a, a + t * direction.ravel(), i


@pytest.mark.parametrize("label", list(CASES))
def test_row_smoothness_is_a_valid_and_attained_constant(label):
    # seed 2, 15 rows; 200 random pairs (a, b) with norms up to 10 (outside the
    # ball of setup: L holds everywhere), every row: ||g(a) - g(b)|| <= L ||a - b||
    # (1 + 1e-9 for rounding). And L is attained to 2% on the extremal pair, so an
    # overstated L fails too (softmax: C = 2, where the bound 1/2 is attained)
    model, data, rng = problem(label, 15, seed=2, n_classes=2)
    rows = row_roles(model)
    L = model.row_smoothness(data.X)
    assert L is not None and L > 0.0
    worst = 0.0
    for _ in range(200):
        a = random_w(rng, model.n_params, 10.0)
        b = a + random_w(rng, model.n_params, rng.choice([1e-3, 0.1, 5.0]))
        for i in range(15):
            ga, gb = rows(data.X, data.y, i, a)[1], rows(data.X, data.y, i, b)[1]
            ratio = np.linalg.norm(ga - gb) / (L * np.linalg.norm(a - b))
            assert ratio <= 1.0 + 1e-9
            worst = max(worst, ratio)
    a, b, i = extremal_pair(label, model, data.X, data.y)
    ga, gb = rows(data.X, data.y, i, a)[1], rows(data.X, data.y, i, b)[1]
    attained = np.linalg.norm(ga - gb) / (L * np.linalg.norm(a - b))
    assert 0.98 <= attained <= 1.0 + 1e-6, attained


@pytest.mark.parametrize("label", [c for c in CASES if c != "huber_linear"])
def test_row_grad_bound_holds_on_its_ball(label):
    # seed 5, 20 rows; row_grad_bound(X, y, rho) for rho = 0.5, 2 (setup's radius)
    # and 6: every row's gradient norm at 300 points of that ball (100 on its
    # sphere) is within it (1 + 1e-12); at setup's radius it is at most grad_bound
    model, data, rng = problem(label, 20, seed=5)
    rows = row_roles(model)
    assert model.row_grad_bound(data.X, data.y, 2.0) <= model.grad_bound * (1.0 + 1e-12)
    for rho in (0.5, 2.0, 6.0):
        bound = model.row_grad_bound(data.X, data.y, rho)
        top = 0.0
        for k in range(300):
            w = random_w(rng, model.n_params, rho)
            if k < 100:
                w *= rho / np.linalg.norm(w)
            for i in range(20):
                top = max(top, float(np.linalg.norm(rows(data.X, data.y, i, w)[1])))
        assert top <= bound * (1.0 + 1e-12)
        assert top >= 0.2 * bound  # measured 0.4-0.9: the bound is not vacuous


def test_the_linear_bound_is_attained():
    # the squared error's row bound 2 (rho ||x'|| + |y|) ||x'|| / scale is attained at
    # w = -rho x'/||x'|| on the row where it is largest (y >= 0): rtol 1e-12
    model, data, _ = problem("linear_mse", 20, seed=6)
    rows = row_roles(model)
    Xt = np.hstack((data.X, np.ones((20, 1))))
    norms = np.linalg.norm(Xt, axis=1)
    i = int(np.argmax(2.0 * (3.0 * norms + np.abs(data.y)) * norms))
    w = -3.0 * Xt[i] / norms[i]
    g = rows(data.X, data.y, i, w)[1]
    assert np.linalg.norm(g) == pytest.approx(model.row_grad_bound(data.X, data.y, 3.0),
                                              rel=1e-12)


# ---------------------------------------------------------------------------
# the third party's models: registered by the hook, OPT from cvx_raw_losses
# ---------------------------------------------------------------------------


def test_toy_models_register_through_the_hook_and_differ_from_the_built_ins():
    assert REGISTRY.get("model", "huber_linear").plugin == "mmb_toy_models"
    assert REGISTRY.get("model", "ovr_squared_hinge").plugin == "mmb_toy_models"
    assert "huber_linear" not in default_registry().names("model")
    huber, _, _ = problem("huber_linear", 5, seed=0)
    assert getattr(huber, "compiled", None) is None  # Python only
    hinge, _, _ = problem("ovr_squared_hinge", 5, seed=0)
    assert hinge.compiled().kernels.endswith("squared_hinge:ovr_squared_hinge")


@pytest.mark.parametrize("label", ["huber_linear", "ovr_squared_hinge"])
def test_toy_models_cvx_losses_and_exact_optimum(label):
    # seed 7, 30 rows, radius 2: the cvxpy expression equals raw_losses at random
    # points (rtol 1e-10), and OPT over the k-set (k = 5) is certified; its w has
    # the value OPT within the certificate (rtol 1e-5)
    cp = pytest.importorskip("cvxpy")
    from plugins.metrics import optimum

    model, data, rng = problem(label, 30, seed=7)
    w = cp.Variable(model.n_params)
    expr = model.cvx_raw_losses(w, data.X, data.y)
    for _ in range(3):
        w.value = random_w(rng, model.n_params, 2.0)
        np.testing.assert_allclose(expr.value, model.raw_losses(w.value, data.X, data.y),
                                   rtol=1e-10)
    caps = np.full(30, 1.0 / 5)
    opt = optimum.solve(data.X, data.y, model, caps, 2.0)
    assert opt.lower <= opt.value <= opt.lower + 1e-5 * abs(opt.value) + 1e-8
    top = np.sort(model.losses(np.asarray(opt.w), data.X, data.y))[-5:].mean()
    assert top == pytest.approx(opt.value, rel=1e-5)
