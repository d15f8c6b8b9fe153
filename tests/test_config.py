"""One source of defaults: ``harness.compose`` builds the CLI's config, options
are generated from the ``Param`` tables, the shipped YAML agrees with them,
and an unknown option or key is one line."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
import yaml
from omegaconf import OmegaConf

import harness
from harness import Param, Proposal, config
from harness.api import GAME_PARAMS, RUN_SWITCHES
from harness.config import GROUPS, SET_BY_HARNESS, compose, config_dir, unknown_key
from harness.registry import default_registry
from plugins.tracking.mlflow_names import core_name

CONFIG_YAML = Path(config_dir()) / "config.yaml"


def _is_interpolation(value) -> bool:
    return isinstance(value, str) and value.startswith("${")


def _cases() -> list[tuple[str, str]]:
    registry = default_registry()
    return [(group, name) for group, kind in GROUPS.items() for name in registry.names(kind)]


@pytest.mark.parametrize(("group", "name"), _cases())
def test_every_option_holds_its_param_defaults(group, name):
    # the option Hydra composes for group=name (generated, or a YAML on the search
    # path merged onto it) must hold exactly the class's declared defaults
    kind = GROUPS[group]
    cls = default_registry().get(kind, name).cls
    node = OmegaConf.to_container(compose([f"{group}={name}"])[group], resolve=True)
    assert node.pop("name") == name
    expected = {k: spec.default for k, spec in cls.params.items()
                if k not in SET_BY_HARNESS.get(kind, ())}
    assert node == expected, (
        f"the {group} option '{name}' and the Param table of {cls.__qualname__} disagree: "
        f"config {node} vs Param defaults {expected}")


def test_top_level_yaml_defaults_equal_their_param_tables():
    # every plain (not interpolated) value of conf/config.yaml equals the default of
    # the Param that validates it; interpolated ones (env-dependent paths) resolve
    raw = yaml.safe_load(CONFIG_YAML.read_text())
    for key, spec in {**GAME_PARAMS, **RUN_SWITCHES}.items():
        assert key in raw, f"conf/config.yaml lacks the top-level key '{key}'"
        if not _is_interpolation(raw[key]):
            assert raw[key] == spec.default, (key, raw[key], spec.default)
    for name, value in raw.items():
        if isinstance(value, dict) and name != "hydra":
            assert all(_is_interpolation(v) for v in value.values()), (
                f"conf/config.yaml sets plain values in the block '{name}'; its defaults "
                "belong in the plugin's Param table")
    composed = OmegaConf.to_container(compose([]), resolve=True)
    assert composed["state_dir"] and composed["tracking"]["uri"]


def test_plugin_blocks_come_from_their_param_tables():
    # the composed tracking and reference blocks hold their plugins' declared
    # defaults (the YAML may only override a value with an interpolation)
    registry = default_registry()
    assert {"tracking", "reference"} <= set(registry.blocks)
    composed = OmegaConf.to_container(compose([]), resolve=False)
    raw = yaml.safe_load(CONFIG_YAML.read_text())
    for name, (block, _) in registry.blocks.items():
        expected = {k: spec.default for k, spec in block.params.items()}
        expected.update(raw.get(name) or {})
        assert composed[name] == expected, (name, composed[name], expected)


def test_quiet_overrides_turn_every_plugin_off():
    cfg = compose(["budget=2000"], quiet=True)
    assert cfg.tracking.enabled is False and cfg.reference.exact in (False, "false")
    assert cfg.state_dir is None and cfg.progress is False


class _Counter:
    """A plugin with a config block of its own."""

    seen: ClassVar[list] = []

    @harness.hookimpl
    def register_config_blocks(self, register):
        register(harness.ConfigBlock("counter", {"every": Param(int, default=3, low=1)},
                                     off={"every": 1}))

    @harness.hookimpl
    def on_run_start(self, context):
        _Counter.seen.append(context.config.get("counter"))


def test_a_plugin_owns_its_config_block():
    plugin = _Counter()
    registry = harness.Registry(harness.make_plugin_manager([plugin]))
    cfg = compose(["budget=2000", "counter.every=5"], quiet=True, registry=registry)
    assert cfg.counter.every == 5
    harness.run(cfg, plugins=[plugin])
    assert _Counter.seen[-1] == {"every": 5}
    with pytest.raises(harness.ConfigError, match=r"config key\(s\) \['counter'\]"):
        harness.run(cfg)  # without the plugin, nobody owns the block


def test_model_auto_carries_every_model_parameter():
    # model=auto picks the data set's model; its YAML may only hold parameters
    # every model shares, at their common default
    raw = yaml.safe_load((Path(config_dir()) / "model" / "auto.yaml").read_text())
    registry = default_registry()
    for name in registry.names("model"):
        table = registry.get("model", name).cls.params
        for key, value in raw.items():
            if key != "name":
                assert key in table and table[key].default == value, (name, key)


def test_compose_equals_what_the_cli_composes(run_cli, tmp_path):
    # same overrides, same seed: the API on harness.compose and the CLI give
    # identical final metrics (timings aside), read back from the CLI's MLflow run
    overrides = ["dataset=boston", "budget=20000", "checkpoints=4", "seed=3",
                 "reference.exact=false", f"state_dir={tmp_path / 'state'}"]
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    done = run_cli(*overrides, f"tracking.uri={uri}")
    assert done.returncode == 0, done.stderr[-2000:]
    api = harness.run(compose([*overrides, "tracking.enabled=false"]))
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    (experiment,) = [e for e in client.search_experiments() if e.name == "minimax-bench"]
    (cli_run,) = client.search_runs([experiment.experiment_id])
    cli = {core_name(k): v for k, v in cli_run.data.metrics.items()}  # MLflow's keys mapped
    timing = {k for k in api if k.endswith("_s") or "time" in k}
    assert {k: v for k, v in cli.items() if k not in timing} == {
        k: v for k, v in api.items() if k not in timing}
    assert len(cli) > 8 and cli["data_points"] == api["data_points"] == 20000


def test_compose_works_inside_a_running_hydra_app(tmp_path):
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    with initialize_config_dir(version_base="1.3", config_dir=config_dir()):
        outer = GlobalHydra.instance().hydra
        cfg = compose(["p_player=ftrl"])
        assert GlobalHydra.instance().hydra is outer
    assert cfg.p_player.name == "ftrl" and cfg.budget == GAME_PARAMS["budget"].default


class _Bandit:
    """A p-player of a plugin that ships no YAML: uniform k rows."""

    name: ClassVar[str] = "config_test_bandit"
    constraints: ClassVar[tuple[str, ...] | None] = ("kset",)
    params: ClassVar[dict[str, Param]] = {
        "eta": Param(float, default=0.25, low=0.0),
        "mode": Param(str, default="a", choices=("a", "b")),
    }

    def __init__(self, eta=0.25, mode="a") -> None:
        self.eta, self.mode = eta, mode

    def rows_per_round(self, constraint) -> int:
        return constraint.k

    def setup(self, constraint, horizon):
        self.k_, self.p_ = constraint.k, np.full(constraint.n, 1.0 / constraint.n)
        return {}

    def propose(self, rng):
        rows = rng.choice(self.p_.size, self.k_, replace=False)
        return Proposal(rows, np.full(self.k_, 1.0 / self.k_))

    def observe(self, losses):
        return None

    @property
    def p(self):
        return self.p_

    def regret_bound(self, rounds):
        return None


class _Plugin:
    @harness.hookimpl
    def register_p_players(self, register):
        register(_Bandit)


def test_a_plugin_needs_no_yaml_and_may_ship_a_partial_one(tmp_path):
    registry = harness.Registry(harness.make_plugin_manager([_Plugin()]))
    cfg = compose(["p_player=config_test_bandit", "p_player.mode=b"], registry=registry)
    assert OmegaConf.to_container(cfg.p_player) == {
        "name": "config_test_bandit", "eta": 0.25, "mode": "b"}
    # a YAML on the search path that sets one value is merged onto the generated option
    conf = tmp_path / "myconf" / "p_player"
    conf.mkdir(parents=True)
    (conf / "config_test_bandit.yaml").write_text("name: config_test_bandit\neta: 0.5\n")
    cfg = compose([f"hydra.searchpath=[file://{tmp_path / 'myconf'}]",
                   "p_player=config_test_bandit"], registry=registry)
    assert OmegaConf.to_container(cfg.p_player) == {
        "name": "config_test_bandit", "eta": 0.5, "mode": "a"}
    cfg.budget, cfg.tracking.enabled, cfg.reference.exact = 2000, False, "false"
    cfg.state_dir = None
    assert harness.run(cfg, plugins=[_Plugin()])["data_points"] == 2000


@pytest.mark.parametrize(("override", "group", "given"), [
    ("p_player=nope", "p_player option", "nope"),
    ("dataset=breast_cancer,bostn", "dataset option", "bostn"),
    ("experiment=paper_cancr", "experiment preset", "paper_cancr"),
    ("+experiment=nope", "experiment preset", "nope"),
    ("hydra/launcher=nope", "hydra/launcher option", "nope"),
])
def test_an_unknown_option_is_one_line_and_exit_2(run_cli, override, group, given):
    done = run_cli(override, "tracking.enabled=false")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"minimax-bench: error: Unknown {group} '{given}'")
    assert "Available: [" in lines[0]
    if group == "p_player option":
        assert "'exp4mp'" in lines[0] and "'ftrl'" in lines[0]


UNKNOWN_KEYS = [
    (("budjet=1000",), "budjet", "['budget']", "at the top level"),
    (("p_player.etaa=0.1",), "p_player.etaa", "['p_player.eta', ", "in p_player=exp4mp"),
    (("tracking.enabeld=false",), "tracking.enabeld", "['tracking.enabled']", "in tracking"),
    (("dataset.splt=train",), "dataset.splt", "['dataset.split'", "in dataset="),
    (("p_player=ftrl", "p_player.etaa=1"), "p_player.etaa", "['p_player.eta', ",
     "in p_player=ftrl: ['eta', 'eta_scale', 'name']"),
    (("--multirun", "budjet=1000,2000"), "budjet", "['budget']", "at the top level"),
    # the key is exp4mp's, not ru_sgd's: each option a sweep picks is checked
    (("--multirun", "p_player=exp4mp,ru_sgd", "p_player.gamma=0.1"), "p_player.gamma", "none",
     "in p_player=ru_sgd"),
]


@pytest.mark.parametrize(("args", "key", "closest", "where"), UNKNOWN_KEYS,
                         ids=[" ".join(a) for a, *_ in UNKNOWN_KEYS])
def test_an_unknown_key_is_one_line_with_the_closest_keys_and_exit_2(
        run_cli, tmp_path, args, key, closest, where):
    done = run_cli(*args, "tracking.enabled=false")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr  # before Hydra's own message, instead of it
    assert lines[0].startswith(f"minimax-bench: error: Unknown config key '{key}' in ")
    assert f"Closest: {closest}" in lines[0] and f"Available {where}" in lines[0]
    assert not (tmp_path / "outputs").exists() and not (tmp_path / "multirun").exists()


@pytest.mark.parametrize("args", [
    ["budget=2000", "p_player.gamma=0.1", "tracking.enabled=false", "problem.mu=0"],
    ["p_player=ftrl", "p_player.eta=0.1"],
    ["model.loss_scale=2"],  # model=auto, an option of YAML alone: composed to be checked
    ["experiment=paper_cancer", "p_player.eta_scale=2"],
    ["constraint=alphaset_groups", "constraint.caps.by_group.column=group"],
    ["+budjet=1000"], ["++budjet=1000"], ["+p_player.foo=1", "p_player.foo=2"],
    ["hydra.job.nme=x"],  # a key under hydra. is Hydra's to report
    ["--multirun", "seed=0,1", "p_player=exp4mp,ftrl", "p_player.eta_scale=2"],
])
def test_known_keys_and_explicit_adds_pass(args):
    assert unknown_key(args) is None


def test_the_option_picked_decides_which_keys_exist():
    assert unknown_key(["p_player.gamma=0.1"]) is None  # exp4mp's gamma
    message = unknown_key(["p_player=ftrl", "p_player.gamma=0.1"])
    assert message is not None and "Available in p_player=ftrl: " in message
    message = unknown_key(["experiment=paper_cancer", "p_player.eta_scal=2"])
    assert message is not None and "Closest: ['p_player.eta_scale']" in message
    # a key of another block is offered where its name is close
    assert "Closest: ['constraint.k']" in unknown_key(["k=10"])
    assert "Closest: ['p_player.eta', " in unknown_key(["pplayer.eta=1"])


def test_keys_the_tables_vouch_for_are_checked_without_composing(monkeypatch):
    composed = []
    monkeypatch.setattr(config, "_hydra_compose", lambda *args, **kw: composed.append(args))
    assert unknown_key(["budget=2000", "seed=3", "p_player=ftrl", "p_player.eta=0.1",
                        "dataset=boston", "dataset.scale=standard", "tracking.enabled=false",
                        "reference.exact=false", "problem.mu=0", "constraint.k=10"]) is None
    assert composed == []


def test_compose_refuses_an_unknown_key_as_the_command_does():
    with pytest.raises(harness.ConfigError) as err:
        compose(["p_player=ftrl", "p_player.etaa=1"])
    assert str(err.value) == unknown_key(["p_player=ftrl", "p_player.etaa=1"])
    assert str(err.value).startswith("Unknown config key 'p_player.etaa' in 'p_player.etaa=1'.")
    registry = harness.Registry(harness.make_plugin_manager([_Plugin()]))
    with pytest.raises(harness.ConfigError, match=r"Closest: \['p_player.mode'\]\. "
                       r"Available in p_player=config_test_bandit: \['eta', 'mode', 'name'\]"):
        compose(["p_player=config_test_bandit", "p_player.mod=b"], registry=registry)


@pytest.mark.parametrize(("group", "name"), _cases())
def test_constructor_defaults_equal_the_param_table(group, name):
    # a class's __init__ defaults and its Param table are two copies of one fact;
    # a constructor default that differs would make harness.build and the config
    # disagree for a caller who bypasses the table
    import inspect

    cls = default_registry().get(GROUPS[group], name).cls
    for key, parameter in inspect.signature(cls.__init__).parameters.items():
        if key == "self" or parameter.default is inspect.Parameter.empty:
            continue
        assert key in cls.params, f"{cls.__qualname__}.__init__ takes '{key}', no Param declares it"
        assert parameter.default == cls.params[key].default, (
            f"{cls.__qualname__}: __init__ default {key}={parameter.default!r}, "
            f"Param default {cls.params[key].default!r}")
