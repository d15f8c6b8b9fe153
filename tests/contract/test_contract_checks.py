"""The contract suite's own checks: each one fails on a component built to
break it, and none of them passes by checking nothing (the linear program is
solved for every built-in set, a misspelt plugin name stops the suite)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

import harness
import harness.contract as contract
from harness import Param, Proposal
from plugins.sets.kset import KSet

SUITE = Path(__file__).with_name("test_contract.py")


class NoLPForm(KSet):
    """The k-set under another name whose ``row_caps()`` is None: its LP form is unknown."""

    name: ClassVar[str] = "contract_no_lp_form"
    params: ClassVar[dict[str, Param]] = {"n": Param(int, low=1), "k": Param(int, default=3)}

    def __init__(self, n: int, k: int = 3) -> None:
        super().__init__(n, k)

    def row_caps(self) -> None:
        return None


class WrongOracle(NoLPForm):
    """Declares its LP form; its oracle returns a vertex of the k-set that is in
    general not the best one (the k - 1 largest losses and the smallest)."""

    name: ClassVar[str] = "contract_wrong_oracle"

    def row_caps(self) -> np.ndarray:
        return np.full(self.n, 1.0 / self.k)

    def lmo(self, losses):
        order = np.argsort(losses)
        p = np.zeros(self.n)
        p[order[self.n - self.k + 1:]] = 1.0 / self.k
        p[order[0]] = 1.0 / self.k
        return float(losses @ p), p


class Follower:
    """Exponential weights (step 1, mixing 0.1) on the summed losses it observes."""

    name: ClassVar[str] = "contract_follower"
    constraints: ClassVar[tuple[str, ...] | None] = ("kset",)
    params: ClassVar[dict[str, Param]] = {}

    def rows_per_round(self, constraint) -> int:
        return constraint.k

    def setup(self, constraint, horizon: int) -> dict[str, float]:
        self.K = constraint
        self.sums = np.zeros(constraint.n)
        self.p_ = constraint.project(self.sums, 0.1, log_domain=True)
        return {}

    @property
    def p(self) -> np.ndarray:
        return self.p_

    def propose(self, rng: np.random.Generator) -> Proposal:
        self.rows = self.K.sample(self.p_, rng).rows
        return Proposal(self.rows, np.full(self.rows.size, 1.0 / self.rows.size))

    def observe(self, losses: np.ndarray) -> None:
        self.sums[self.rows] += losses
        self.p_ = self.K.project(self.sums, 0.1, log_domain=True)

    def regret_bound(self, rounds: int) -> float | None:
        return None


class Peeker(Follower):
    """Adds the losses of every row, read through the run's view the run-start hook gets."""

    name: ClassVar[str] = "contract_peeker"

    def observe(self, losses: np.ndarray) -> None:
        parts = Plugin.run
        self.sums += parts.model.losses(parts.w_player.w, parts.dataset.X, parts.dataset.y)
        self.p_ = self.K.project(self.sums, 0.1, log_domain=True)


class Overdraw(Follower):
    """Proposes one row more than the k rows per round it declares."""

    name: ClassVar[str] = "contract_overdraw"

    def propose(self, rng: np.random.Generator) -> Proposal:
        rows = self.K.sample(self.p_, rng).rows
        extra = np.setdiff1d(np.arange(self.K.n), rows)[:1]
        self.rows = np.concatenate((rows, extra))
        return Proposal(self.rows, np.full(self.rows.size, 1.0 / self.rows.size))


class Overcounter:
    """Projected gradient descent on F in full passes that counts n + 1
    gradients a pass (as if ``mu w`` were one more row's), more than the n rows
    it evaluates; ``value_and_grad`` forms only those of the rows with ``q_i !=
    0``."""

    name: ClassVar[str] = "contract_overcounter"
    params: ClassVar[dict[str, Param]] = {}

    def setup(self, problem, budget):
        self.w = np.zeros(problem.n_params)
        self.data_points = self.grad_evals = 0
        return {}

    def advance(self, problem, rng, until):
        while self.data_points < until:
            _, grad, _ = problem.value_and_grad(self.w)
            self.w = problem.project(self.w - 0.1 * grad)
            self.data_points += problem.n
            self.grad_evals += problem.n + 1


class Plugin:
    run = None

    @harness.hookimpl
    def register_solvers(self, register):
        register(Overcounter)

    @harness.hookimpl
    def register_constraint_sets(self, register):
        register(NoLPForm)
        register(WrongOracle)

    @harness.hookimpl
    def register_p_players(self, register):
        for cls in (Follower, Peeker, Overdraw):
            register(cls)

    @harness.hookimpl
    def on_run_start(self, context):
        Plugin.run = context.parts


@pytest.fixture
def with_broken_plugins(monkeypatch):
    registry = harness.Registry(harness.make_plugin_manager(
        [contract._ContractPlugin(), Plugin()], load_entrypoints=False))
    monkeypatch.setattr(contract, "REGISTRY", registry)


# ---------------------------------------------------------------- linear program


@pytest.mark.parametrize("name", ["kset", "simplex", "alphaset"])
def test_every_builtin_oracle_is_compared_with_a_linear_program(name, monkeypatch):
    calls, solve = [], contract.linprog

    def counted(*args, **kwargs):
        calls.append(kwargs["bounds"])
        return solve(*args, **kwargs)

    monkeypatch.setattr(contract, "linprog", counted)
    try:
        contract.test_constraint_lmo_matches_a_linear_program(name)
    except pytest.skip.Exception as skipped:
        pytest.fail(f"the linear-program check of {name} was skipped: {skipped}")
    assert len(calls) == 20
    caps = np.array([hi for _, hi in calls[0]])
    np.testing.assert_array_equal(caps, contract._lp_caps(contract._constraint(name)))


def test_the_suite_alphaset_has_caps_of_several_sizes():
    K = contract._constraint("alphaset")
    units = np.rint(K.row_caps() * K.k)  # k alpha_i
    assert np.unique(units).size >= 3 and units.sum() > K.k
    game = contract._game("exp4mp", "alphaset", seed=5)  # the p-player checks' games
    np.testing.assert_array_equal(game.parts.constraint.row_caps(), K.row_caps())


def test_a_wrong_oracle_fails_the_linear_program_check(with_broken_plugins):
    with pytest.raises(AssertionError):
        contract.test_constraint_lmo_matches_a_linear_program("contract_wrong_oracle")


def test_a_set_of_unknown_lp_form_is_skipped_with_a_reason(with_broken_plugins):
    with pytest.raises(pytest.skip.Exception, match="contract_no_lp_form.*row_caps"):
        contract.test_constraint_lmo_matches_a_linear_program("contract_no_lp_form")


# ---------------------------------------------------------------- plugin selection


def test_a_misspelt_plugin_name_is_an_error():
    registry = contract.REGISTRY
    with pytest.raises(contract.SelectionError, match=r"\['some_typo'\].*'plugins\.sets\.kset'"):
        contract._selection("plugins.sets.kset,some_typo", registry)
    with pytest.raises(contract.SelectionError, match="register no constraint set"):
        contract._selection("plugins.tracking.mlflow_runs", registry)
    assert contract._selection(" plugins.sets.kset , plugins.p_players.uniform,", registry) == {
        "plugins.sets.kset", "plugins.p_players.uniform"}
    assert contract._selection(" , ", registry) == set()


def test_a_misspelt_plugin_name_stops_the_suite_at_collection():
    env = {**os.environ, contract.SELECT_ENV: "some_typo"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "--collect-only",
                           "-p", "no:cacheprovider", str(SUITE)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode != 0, done.stdout[-2000:]
    assert "SelectionError" in done.stdout and "some_typo" in done.stdout
    assert "plugins.sets.kset" in done.stdout


# ---------------------------------------------------------------- p-players


def test_an_honest_player_passes_the_observation_checks(with_broken_plugins):
    contract.test_p_player_stays_in_the_set_and_proposes_valid_rows("contract_follower", "kset")
    contract.test_p_player_sees_only_the_losses_of_its_rows("contract_follower", "kset")


def test_a_player_reading_the_data_set_fails_the_observation_check(with_broken_plugins):
    contract.test_p_player_stays_in_the_set_and_proposes_valid_rows("contract_peeker", "kset")
    with pytest.raises(AssertionError, match="p_t depends on the losses of rows not proposed"):
        contract.test_p_player_sees_only_the_losses_of_its_rows("contract_peeker", "kset")


def test_a_player_proposing_more_rows_than_it_declares_fails(with_broken_plugins):
    with pytest.raises(AssertionError, match="4 rows proposed, rows_per_round declares 3"):
        contract.test_p_player_stays_in_the_set_and_proposes_valid_rows(
            "contract_overdraw", "kset")


def test_a_data_set_with_features_outside_the_unit_interval_fails_its_check():
    # negative control of the data-set check: one feature at 1.5 (row 7, column 1)
    from harness.contract import ContractData

    data = ContractData()
    data.X[7, 1] = 1.5
    with pytest.raises(AssertionError, match=r"lie in \[0, 1\]; got X\[7, 1\] = 1\.5"):
        contract._check_dataset("contract_data", data, "as built")
    data.X[7, 1] = 0.5
    contract._check_dataset("contract_data", data, "as built")


# ---------------------------------------------------------------- solvers


def test_a_solver_counting_more_gradients_than_data_points_fails(with_broken_plugins):
    with pytest.raises(AssertionError, match=r"'contract_overcounter': grad_evals = 25 exceeds "
                                             r"data_points = 24 at a checkpoint"):
        contract.test_solver_reports_its_iterate_and_counters("contract_overcounter", "paper")
