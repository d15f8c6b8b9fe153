"""The contract suite's check of a model under every solver
(``harness.contract.test_model_reaches_the_exact_opt_under_every_solver``):
it fails on a model whose compiled row roles disagree with its Python
protocol, and skips, with the solver's own message, a pair the solver
refuses."""

from __future__ import annotations

from typing import ClassVar

import pytest
from numba import njit

import harness
import harness.contract as contract
from plugins.models.glm import (
    LinearMSE,
    linear_mse_grad,
    linear_mse_losses,
    linear_mse_row_grad,
    linear_mse_row_loss,
    linear_mse_row_scratch,
)

broken_losses, broken_grad = linear_mse_losses, linear_mse_grad
broken_row_loss, broken_row_scratch = linear_mse_row_loss, linear_mse_row_scratch
off_losses, off_grad = linear_mse_losses, linear_mse_grad
off_row_loss, off_row_scratch = linear_mse_row_loss, linear_mse_row_scratch


@njit(cache=True, error_model="numpy")
def broken_row_grad(ms, X, y, i, w, z, g):  # pragma: no cover - compiled
    """Half of row i's gradient: a row role that disagrees with ``value_and_grad``."""
    linear_mse_row_grad(ms, X, y, i, w, z, g)
    for j in range(g.size):
        g[j] *= 0.5


@njit(cache=True, error_model="numpy")
def off_row_grad(ms, X, y, i, w, z, g):  # pragma: no cover - compiled
    """1.01 times row i's gradient: a subtly wrong row role."""
    linear_mse_row_grad(ms, X, y, i, w, z, g)
    for j in range(g.size):
        g[j] *= 1.01


class OffByOnePercent(LinearMSE):
    """linear_mse whose compiled row gradient is 1% too long."""

    name: ClassVar[str] = "contract_off_one_percent"
    kernels: ClassVar[str] = f"{__name__}:off"


class BrokenRows(LinearMSE):
    """linear_mse whose compiled row gradient is half the true one."""

    name: ClassVar[str] = "contract_broken_rows"
    kernels: ClassVar[str] = f"{__name__}:broken"


class NoSmoothness(LinearMSE):
    """linear_mse that declares no smoothness of its rows."""

    name: ClassVar[str] = "contract_no_smoothness"

    def row_smoothness(self, X):
        return None


class Plugin:
    @harness.hookimpl
    def register_models(self, register):
        register(BrokenRows)
        register(OffByOnePercent)
        register(NoSmoothness)


@pytest.fixture
def with_models(monkeypatch):
    registry = harness.Registry(harness.make_plugin_manager(
        [contract._ContractPlugin(), Plugin()], load_entrypoints=False))
    monkeypatch.setattr(contract, "REGISTRY", registry)


@pytest.mark.parametrize("solver", ["prospect", "lsvrg", "sgd"])
def test_a_model_whose_row_roles_disagree_with_its_protocol_fails(with_models, solver):
    pytest.importorskip("cvxpy")
    contract.test_model_reaches_the_exact_opt_under_every_solver("linear_mse", solver)
    with pytest.raises(AssertionError, match=rf"'contract_broken_rows' under solver '{solver}'"):
        contract.test_model_reaches_the_exact_opt_under_every_solver("contract_broken_rows",
                                                                     solver)


def test_a_gradient_off_by_one_percent_fails_under_a_linearly_converging_solver(with_models):
    # prospect declares contract_accuracy 1e-8 (linear convergence on the
    # contract's smooth, strongly convex problem): a row gradient 1.01 times the
    # true one stops short of OPT by more (measured 1.1e-5; linear_mse 1.1e-15),
    # which a 2e-2 bound lets through; under sgd (the default 2e-2) it passes
    pytest.importorskip("cvxpy")
    assert contract.REGISTRY.get("solver", "prospect").cls.contract_accuracy == 1e-8
    with pytest.raises(AssertionError,
                       match=r"'contract_off_one_percent' under solver 'prospect'.*at most 1e-08"):
        contract.test_model_reaches_the_exact_opt_under_every_solver(
            "contract_off_one_percent", "prospect")
    contract.test_model_reaches_the_exact_opt_under_every_solver("contract_off_one_percent",
                                                                 "sgd")


def test_a_refused_pair_is_skipped_with_the_solvers_message(with_models):
    pytest.importorskip("cvxpy")
    with pytest.raises(pytest.skip.Exception,
                       match=r"'prospect' refuses model 'contract_no_smoothness'.*row_smoothness"):
        contract.test_model_reaches_the_exact_opt_under_every_solver("contract_no_smoothness",
                                                                     "prospect")


def test_every_model_meets_every_solver():
    cases = set(contract._model_solver_cases())
    models = set(contract.REGISTRY.names("model"))
    solvers = {s for s in contract.REGISTRY.names("solver")
               if not contract._composed(contract.REGISTRY, s)}
    assert {"prospect", "lsvrg", "sgd", "full_batch"} <= solvers
    assert cases == {(m, s) for m in models for s in solvers}
