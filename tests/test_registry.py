"""The plugin contract: third-party registration, name clashes, unknown names,
malformed component classes and misspelled hooks.

Every test builds its own plugin manager (``harness.make_plugin_manager``)
with ``load_entrypoints=False`` where the test inspects the registry, so
nothing installed on the machine and nothing from another test leaks in.
"""

from __future__ import annotations

import math
import types
from typing import Any, ClassVar

import numpy as np
import pluggy
import pytest

import harness
from harness.protocols import Dataset, PPlayer
from harness.registry import KINDS, builtin_plugins
from plugins.p_players.exp4mp import Exp4MP

# --------------------------------------------------------------------------- a third party


class ThirdPartyExp4MP(Exp4MP):
    """EXP4.MP under another name: a p-player shipped by a third party."""

    name: ClassVar[str] = "acme_exp4mp"


class TinyBlobs:
    """40 rows x 3 features in [0, 1], two classes: a data set shipped by a third party."""

    name: ClassVar[str] = "acme_blobs"
    params: ClassVar[dict[str, harness.Param]] = {}
    task: ClassVar[str] = "classification"
    n_classes: ClassVar[int] = 2
    default_model: ClassVar[str] = "logistic_cel"
    provenance: ClassVar[dict[str, str]] = {"source": "generated in tests/test_registry.py"}

    def __init__(self) -> None:
        rng = np.random.default_rng(1234)
        y = np.arange(40) % 2
        X = 0.5 + 0.25 * (y[:, None] - 0.5) + 0.1 * rng.standard_normal((40, 3))
        self.X = np.clip(X, 0.0, 1.0)
        self.y = y.astype(np.int64)


class AcmePlugin:
    """A plugin object (not a module) with two registration hooks."""

    @harness.hookimpl
    def register_p_players(self, register):
        register(ThirdPartyExp4MP)

    @harness.hookimpl
    def register_datasets(self, register):
        register(TinyBlobs)


def plugin_module(module_name: str, **hooks: Any) -> types.ModuleType:
    """A plugin module named ``module_name`` whose functions are ``hooks``
    (each marked with ``harness.hookimpl``): how a third-party package looks."""
    module = types.ModuleType(module_name)
    for hook_name, function in hooks.items():
        function.__name__ = hook_name
        setattr(module, hook_name, harness.hookimpl(function))
    return module


def registry_with(*plugins: Any) -> harness.Registry:
    return harness.Registry(harness.make_plugin_manager(plugins, load_entrypoints=False))


def acme_cfg(tiny_cfg: dict[str, Any]) -> dict[str, Any]:
    cfg = dict(tiny_cfg)
    cfg["p_player"] = {"name": "acme_exp4mp"}
    cfg["dataset"] = {"name": "acme_blobs"}
    cfg["budget"] = 2000  # T = 400 rounds of k = 5 rows
    return cfg


# --------------------------------------------------------------------------- registration


def test_third_party_names_are_listed():
    registry = registry_with(AcmePlugin())
    assert "acme_exp4mp" in registry.names("p_player")
    assert "exp4mp" in registry.names("p_player")  # the built-ins are still there
    assert "acme_blobs" in registry.names("dataset")
    assert {"breast_cancer", "boston"} <= set(registry.names("dataset"))
    assert registry.get("p_player", "acme_exp4mp").cls is ThirdPartyExp4MP
    assert registry.get("dataset", "acme_blobs").cls is TinyBlobs


def test_third_party_plugin_runs_by_name(tiny_cfg):
    metrics = harness.run(acme_cfg(tiny_cfg), plugins=[AcmePlugin()])

    assert metrics["data_points"] == 2000.0
    assert metrics["rounds"] == 400.0
    for key in ("dual_gap", "objective", "accuracy", "max_loss", "theory_bound"):
        assert math.isfinite(metrics[key]), key
    assert metrics["dual_gap"] >= -1e-9  # a certified upper bound of a non-negative gap


def test_third_party_components_satisfy_the_protocols(tiny_cfg):
    registry = registry_with(AcmePlugin())
    prepared = harness.prepare(acme_cfg(tiny_cfg), registry)

    assert type(prepared.parts.p_player) is ThirdPartyExp4MP
    assert type(prepared.parts.dataset) is TinyBlobs
    assert isinstance(prepared.parts.p_player, PPlayer)  # after setup: p_t exists
    assert isinstance(prepared.parts.dataset, Dataset)
    assert prepared.context.tags["algorithm"] == "acme_exp4mp"
    assert prepared.context.tags["dataset"] == "acme_blobs"
    assert prepared.context.params["n"] == 40


def test_plugins_do_not_leak_between_plugin_managers(tiny_cfg):
    registry_with(AcmePlugin())
    harness.run(acme_cfg(tiny_cfg), plugins=[AcmePlugin()])

    fresh = registry_with()
    assert "acme_exp4mp" not in fresh.names("p_player")
    assert "acme_blobs" not in fresh.names("dataset")
    # the process-wide default registry never saw the per-run plugin either
    with pytest.raises(harness.ConfigError, match="acme_exp4mp"):
        harness.build("p_player", "acme_exp4mp")
    with pytest.raises(harness.ConfigError):
        harness.run(acme_cfg(tiny_cfg))


# --------------------------------------------------------------------------- name clashes


def _register_dup(register):
    class Dup(ThirdPartyExp4MP):
        name: ClassVar[str] = "dup_player"

    register(Dup)


def test_name_registered_twice_names_both_plugins():
    first = plugin_module("acme_first", register_p_players=_register_dup)
    second = plugin_module("acme_second", register_p_players=_register_dup)
    pm = harness.make_plugin_manager([first, second], load_entrypoints=False)

    with pytest.raises(harness.PluginError) as info:
        harness.Registry(pm)

    message = str(info.value)
    assert "'dup_player'" in message
    assert "p_player" in message
    assert "'acme_first'" in message
    assert "'acme_second'" in message
    assert info.value.plugin == "acme_second"


def test_third_party_reusing_a_builtin_name_is_an_error():
    class Impostor(ThirdPartyExp4MP):
        name: ClassVar[str] = "exp4mp"

    class ImpostorPlugin:
        @harness.hookimpl
        def register_p_players(self, register):
            register(Impostor)

    plugin = ImpostorPlugin()
    pm = harness.make_plugin_manager([plugin], load_entrypoints=False)

    with pytest.raises(harness.PluginError) as info:
        harness.Registry(pm)

    assert "'plugins.p_players.exp4mp'" in str(info.value)
    assert f"'{pm.get_name(plugin)}'" in str(info.value)
    assert info.value.plugin == pm.get_name(plugin)


# --------------------------------------------------------------------------- unknown names


@pytest.mark.parametrize("kind", list(KINDS))
def test_unknown_name_lists_the_registered_names(kind):
    registry = registry_with(AcmePlugin())
    known = registry.names(kind)
    assert known  # every kind has built-ins

    with pytest.raises(harness.ConfigError) as info:
        registry.build(kind, "no_such_thing")

    message = str(info.value)
    assert "'no_such_thing'" in message
    assert kind in message
    assert str(known) in message


def test_unknown_name_in_a_config_lists_third_party_names_too(tiny_cfg):
    cfg = dict(tiny_cfg, p_player={"name": "nope"})
    with pytest.raises(harness.ConfigError) as info:
        harness.run(cfg, plugins=[AcmePlugin()])
    assert "'nope'" in str(info.value)
    assert "acme_exp4mp" in str(info.value)
    assert "exp4mp" in str(info.value)


def test_unknown_kind_is_a_config_error():
    with pytest.raises(harness.ConfigError, match="p_players"):
        registry_with().names("p_players")


# --------------------------------------------------------------------------- malformed classes


class NoName:
    params: ClassVar[dict[str, harness.Param]] = {}


class EmptyName:
    name: ClassVar[str] = ""
    params: ClassVar[dict[str, harness.Param]] = {}


class NonStringName:
    name: ClassVar[int] = 7
    params: ClassVar[dict[str, harness.Param]] = {}


class NoParams:
    name: ClassVar[str] = "acme_no_params"


class ParamsNotADict:
    name: ClassVar[str] = "acme_params_list"
    params: ClassVar[list[str]] = ["eta"]


@pytest.mark.parametrize(
    ("cls", "what"),
    [
        (NoName, "'name'"),
        (EmptyName, "'name'"),
        (NonStringName, "'name'"),
        (NoParams, "'params'"),
        (ParamsNotADict, "'params'"),
    ],
    ids=["no-name", "empty-name", "int-name", "no-params", "params-list"],
)
def test_malformed_component_class_is_a_plugin_error(cls, what):
    def register_w_players(register):
        register(cls)

    bad = plugin_module("acme_broken", register_w_players=register_w_players)
    pm = harness.make_plugin_manager([bad], load_entrypoints=False)

    with pytest.raises(harness.PluginError) as info:
        harness.Registry(pm)

    assert info.value.plugin == "acme_broken"
    assert "'acme_broken'" in str(info.value)
    assert what in str(info.value)
    assert "w_player" in str(info.value)


# --------------------------------------------------------------------------- misspelled hooks


def test_misspelled_hook_name_is_caught_by_make_plugin_manager():
    def register_p_player(register):  # missing the final 's'
        register(ThirdPartyExp4MP)

    typo = plugin_module("acme_typo", register_p_player=register_p_player)

    with pytest.raises(pluggy.PluginValidationError) as info:
        harness.make_plugin_manager([typo], load_entrypoints=False)

    assert info.value.plugin is typo
    assert "register_p_player" in str(info.value)


def test_misspelled_hook_argument_is_caught_by_make_plugin_manager():
    def register_p_players(registr):  # the spec's argument is 'register'
        registr(ThirdPartyExp4MP)

    typo = plugin_module("acme_arg_typo", register_p_players=register_p_players)

    with pytest.raises(pluggy.PluginValidationError) as info:
        harness.make_plugin_manager([typo], load_entrypoints=False)

    assert "registr" in str(info.value)


def test_each_plugin_manager_is_fresh():
    pm_a = harness.make_plugin_manager([AcmePlugin()], load_entrypoints=False)
    pm_b = harness.make_plugin_manager(load_entrypoints=False)
    assert pm_a is not pm_b
    names_b = {pm_b.get_name(p) for p in pm_b.get_plugins()}
    assert names_b == set(builtin_plugins())
    assert len(pm_a.get_plugins()) == len(builtin_plugins()) + 1
