"""What every constraint set declares (harness.protocols.ConstraintSet): a
``Draw`` from ``sample``, ``row_caps()``, ``sampler``; the optional
``EuclideanProjection``; and what a set written against the 0.1 contract
(a bare array from ``sample``, no ``row_caps``/``sampler``) is told.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np
import pytest

import harness
import harness.contract as contract
from harness import Param

N = 30


def builtin_sets():
    """(label, set, sampler) for every built-in set, the k-set with both samplers."""
    caps = np.ones(N, dtype=np.int64)
    caps[::3] = 2
    caps[::7] = 4
    return [
        ("kset/depround", harness.build("constraint_set", "kset", n=N, k=4), "depround"),
        ("kset/systematic", harness.build("constraint_set", "kset", n=N, k=4,
                                          sampler="systematic"), "systematic"),
        ("simplex", harness.build("constraint_set", "simplex", n=N), "systematic"),
        ("alphaset", harness.build("constraint_set", "alphaset", n=N, k=4,
                                   caps={"rows": caps.tolist()}), "multiset"),
    ]


@pytest.mark.parametrize(("label", "K", "sampler"), builtin_sets(),
                         ids=[c[0] for c in builtin_sets()])
def test_every_builtin_set_samples_a_draw(label, K, sampler):
    # seed 0, 200 draws from a projection and from a vertex mixture
    assert K.sampler == sampler
    rng = np.random.default_rng(0)
    p = K.project(rng.random(N) ** 3, 0.1)
    for point in (p, 0.5 * p + 0.5 * K.lmo(rng.random(N))[1]):
        for _ in range(100):
            draw = K.sample(point, rng)
            assert isinstance(draw, harness.Draw)
            rows, mult = draw
            assert rows.dtype == np.int64 and mult.dtype == np.int64
            assert rows.shape == mult.shape and np.unique(rows).size == rows.size
            assert mult.min() >= 1 and int(mult.sum()) == K.k
            if sampler != "multiset":  # k distinct rows
                assert np.all(mult == 1) and rows.size == K.k
            a = np.zeros(N)
            a[rows] = mult / K.k
            assert K.contains(a)


def test_row_caps_of_the_builtin_sets_are_their_definitions():
    kset, systematic, simplex, alphaset = (K for _, K, _ in builtin_sets())
    np.testing.assert_array_equal(kset.row_caps(), np.full(N, 1 / 4))
    np.testing.assert_array_equal(systematic.row_caps(), np.full(N, 1 / 4))
    np.testing.assert_array_equal(simplex.row_caps(), np.ones(N))
    want = np.ones(N)
    want[::3] = 2
    want[::7] = 4
    np.testing.assert_array_equal(alphaset.row_caps(), want / 4)
    np.testing.assert_array_equal(alphaset.row_caps(), alphaset.alpha)
    for K in (kset, simplex, alphaset):  # the oracle fills the caps greedily
        losses = np.random.default_rng(1).random(N)
        order = np.argsort(-losses)
        caps = K.row_caps()[order]
        fill = np.minimum(caps, np.maximum(1.0 - (np.cumsum(caps) - caps), 0.0))
        assert K.lmo(losses)[0] == pytest.approx(float(losses[order] @ fill), abs=1e-12)


def test_exp4mp_and_ftrl_read_their_theory_from_row_caps():
    # Theorem D.2 applies iff every cap is 1/k; FTRL's entropy range is log(n max c)
    unit = harness.build("constraint_set", "alphaset", n=N, k=4)
    kset, _, simplex, alphaset = (K for _, K, _ in builtin_sets())
    for K, proven in ((kset, True), (unit, True), (alphaset, False)):
        pp = harness.build("p_player", "exp4mp")
        pp.setup(K, 10_000)
        assert (pp.regret_bound(100) is not None) == proven
    ftrl = harness.build("p_player", "ftrl")
    assert ftrl.entropy_range(kset) == math.log(N / 4) == ftrl.entropy_range(unit)
    assert ftrl.entropy_range(simplex) == math.log(N)
    assert ftrl.entropy_range(alphaset) == math.log(N * 1.0)  # the largest cap, 4/4


class UnknownForm:
    """The k-set with its LP form withheld: ``row_caps()`` is None, so the
    p-players that read caps take the set's own ``project``."""

    def __init__(self, n: int, k: int) -> None:
        self.inner = harness.build("constraint_set", "kset", n=n, k=k)
        self.n, self.k = n, k

    def row_caps(self):
        return None

    def project(self, weights, gamma=0.0, **options):
        return self.inner.project(weights, gamma, **options)


def test_ftrl_projects_with_the_set_itself_when_its_form_is_unknown():
    # FTRL on a capped simplex runs the compiled path's kernels (a warm-started
    # projection of the weights); on a set without row caps, the set's own KL
    # projection of the log-weights. 400 rounds of the same losses (seed 2,
    # uniform on [0, 1]; eta = 0.5, so rows reach the caps): the same p to 1e-12
    n, k = N, 4
    losses = np.random.default_rng(2).random((400, n))
    players = []
    for K in (harness.build("constraint_set", "kset", n=n, k=k), UnknownForm(n, k)):
        pp = harness.build("p_player", "ftrl", eta=0.5)
        pp.setup(K, 400)
        players.append(pp)
    assert players[0].set_state_ is not None and players[1].set_state_ is None
    for t in range(400):
        for pp in players:
            pp.observe(losses[t])
        np.testing.assert_allclose(players[0].p, players[1].p, rtol=0, atol=1e-12)
    assert np.isclose(players[0].p.max(), 1.0 / k)  # some rows capped


# ---------------------------------------------------------------- third parties


class OldKSet:
    """A k-set written against the 0.1 contract: ``sample`` returns the rows, and
    it has neither ``row_caps`` nor ``sampler``."""

    name: ClassVar[str] = "old_kset"
    params: ClassVar[dict[str, Param]] = {"n": Param(int, low=1), "k": Param(int, default=3)}

    def __init__(self, n: int, k: int = 3) -> None:
        self.n, self.k = n, k
        self.inner = harness.build("constraint_set", "kset", n=n, k=k)

    def lmo(self, losses):
        return self.inner.lmo(losses)

    def project(self, weights, gamma=0.0, **options):
        return self.inner.project(weights, gamma, **options)

    def sample(self, p, rng):
        return self.inner.sample(p, rng).rows

    def contains(self, p, atol=1e-9):
        return self.inner.contains(p, atol)


class HalfUpdated(OldKSet):
    """Declares ``sampler`` only."""

    name: ClassVar[str] = "half_updated"
    sampler: ClassVar[str] = "depround"


class BareArraySample(HalfUpdated):
    """Declares both new members but still returns a bare array from ``sample``."""

    name: ClassVar[str] = "bare_array_sample"

    def row_caps(self):
        return np.full(self.n, 1.0 / self.k)


class NoEuclidean(BareArraySample):
    """A 0.2 set without the optional Euclidean projection."""

    name: ClassVar[str] = "no_euclidean"

    def sample(self, p, rng):
        return self.inner.sample(p, rng)


class OldPlugin:
    @harness.hookimpl
    def register_constraint_sets(self, register):
        for cls in (OldKSet, HalfUpdated, BareArraySample, NoEuclidean):
            register(cls)


@pytest.fixture
def registry():
    return harness.Registry(harness.make_plugin_manager(
        [contract._ContractPlugin(), OldPlugin()], load_entrypoints=False))


@pytest.mark.parametrize(("name", "missing"), [("old_kset", "row_caps() and sampler"),
                                               ("half_updated", "row_caps()")])
def test_a_set_without_the_new_members_is_told_what_changed(registry, name, missing):
    with pytest.raises(harness.PluginError, match=(
            rf"The constraint set '{name}' of plugin '.*OldPlugin' lacks "
            rf"{missing.replace('(', '[(]').replace(')', '[)]')}, which constraint sets "
            r"declare since minimax-bench 0\.2 .*; see docs/plugins\.md")) as err:
        registry.build("constraint_set", name, n=N)
    assert "OldPlugin" in err.value.plugin


def test_the_contract_suite_says_a_bare_array_from_sample_is_no_draw(registry, monkeypatch):
    monkeypatch.setattr(contract, "REGISTRY", registry)
    with pytest.raises(AssertionError, match=r"'bare_array_sample': sample\(p, rng\) must "
                                             r"return a harness\.Draw.*since minimax-bench 0\.2"):
        contract.test_constraint_sampler_marginals("bare_array_sample")


def test_safl_on_a_set_without_euclidean_project_is_a_config_error(registry):
    K = registry.build("constraint_set", "no_euclidean", n=N)
    assert not isinstance(K, harness.EuclideanProjection)
    assert isinstance(harness.build("constraint_set", "kset", n=N, k=3),
                      harness.EuclideanProjection)
    with pytest.raises(harness.ConfigError,
                       match="'safl'.*'no_euclidean' has no euclidean_project"):
        harness.build("p_player", "safl").setup(K, 1000)
