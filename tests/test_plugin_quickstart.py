"""What docs/plugins.md promises a plugin author.

The quickstart, followed as a user would: its files are written out, built
into a wheel, installed (not editable) into a fresh virtual environment beside
a wheel of minimax-bench, run by name with the installed ``minimax-bench``
command from an unrelated folder, and checked by the contract suite.
Dependencies come from this test environment, so nothing is downloaded.
And a model that declares ``needs_unit_features`` gets features in [0, 1]."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path
from typing import ClassVar

import pytest

import harness
from harness.contract import ContractData
from plugins.models.glm import LogisticCEL

REPO = Path(__file__).resolve().parents[1]
GUIDE = REPO / "docs" / "plugins.md"
#: a fenced block whose first line is a comment naming its file, e.g. `# my-plugin/x.py`
FILE_BLOCK = re.compile(r"^```\w*\n# (my-plugin/\S+)\n(.*?)^```$", re.M | re.S)
COMMANDS = re.compile(r"^```bash\n(.*?)^```$", re.M | re.S)


def quickstart() -> tuple[dict[str, str], list[str]]:
    """The quickstart section's files (path -> text) and its shell commands."""
    section = GUIDE.read_text().split("\n## ")[1]
    assert section.startswith("Quickstart"), section[:80]
    files = {path: text for path, text in FILE_BLOCK.findall(section)}
    commands = [line.split("#", 1)[0].strip()
                for block in COMMANDS.findall(section) for line in block.splitlines()]
    return files, [c for c in commands if c]


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None,
         timeout: float = 300) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"{shlex.join(cmd)}\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    return done


def test_the_quickstart_package_installs_runs_and_passes_the_contract_suite(tmp_path):
    files, commands = quickstart()
    assert {"my-plugin/pyproject.toml", "my-plugin/tests/test_contract.py"} <= set(files)
    for path, text in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    package = tmp_path / "my-plugin"
    plugin_name, = tomllib.loads(files["my-plugin/pyproject.toml"])["project"][
        "entry-points"]["minimax_bench"]

    wheels = tmp_path / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(wheels),
          str(REPO), str(package)], cwd=tmp_path)
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path)
    py = venv / "bin" / "python"
    site = _run([str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                cwd=tmp_path).stdout.strip()
    _run([sys.executable, "-m", "pip", "--python", str(py), "install", "--quiet", "--no-deps",
          "--no-index", *map(str, wheels.glob("*.whl"))], cwd=tmp_path)
    # dependencies come from this environment; its .pth files (the editable
    # install of this checkout) are not processed from there
    Path(site, "deps.pth").write_text(sysconfig.get_path("purelib") + "\n")

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "MLFLOW_TRACKING_URI", "MINIMAX_BENCH_CONTRACT_PLUGINS",
                        "MINIMAX_BENCH_DISABLE_PLUGIN_AUTOLOAD")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    where = _run([str(py), "-c", f"import harness, {plugin_name}; "
                  f"print(harness.__file__, {plugin_name}.__file__)"], cwd=elsewhere, env=env)
    assert all(f.startswith(site) for f in where.stdout.split()), where.stdout

    runs = [c for c in commands if c.startswith("minimax-bench ")]
    assert runs, commands
    datasets = set()
    for command in runs:  # by name, with the installed console script
        args = shlex.split(command)[1:] + ["budget=2000", "checkpoints=3",
                                           "tracking.enabled=false"]
        done = _run([str(venv / "bin" / "minimax-bench"), *args], cwd=elsewhere, env=env)
        dataset = dict(a.split("=", 1) for a in args)["dataset"]
        assert f"on {dataset}" in done.stdout, done.stdout[-2000:]
        datasets.add(dataset)

    suite = _run([str(py), "-m", "pytest", "-v", "-rs", "-p", "no:cacheprovider",
                  str(package / "tests")], cwd=elsewhere,
                 env={**env, "MINIMAX_BENCH_CONTRACT_PLUGINS": plugin_name}).stdout
    passed = re.findall(r"::(test_\w+)\[(\w+)\] PASSED", suite)
    for name in datasets:
        assert ("test_dataset_at_its_defaults", name) in passed, suite[-3000:]
        assert ("test_dataset_shapes_values_and_task", name) in passed, suite[-3000:]
    assert "got empty parameter set" not in suite, suite[-3000:]


class _UnitFeaturesLogistic(LogisticCEL):
    """The built-in softmax regression, declaring a loss bound for features in [0, 1]."""

    name: ClassVar[str] = "unit_features_logistic"
    needs_unit_features: ClassVar[bool] = True


class _Unscaled(ContractData):
    """The contract data with one feature outside [0, 1]."""

    name: ClassVar[str] = "unscaled"

    def __init__(self, task: str = "classification") -> None:
        super().__init__(task)
        self.X[5, 2] = 1.5


class _Plugin:
    @harness.hookimpl
    def register_models(self, register):
        register(_UnitFeaturesLogistic)

    @harness.hookimpl
    def register_datasets(self, register):
        register(ContractData)
        register(_Unscaled)


@pytest.mark.parametrize(("model", "dataset", "refused"), [
    ("unit_features_logistic", "unscaled", True),
    ("unit_features_logistic", "contract_data", False),
    ("logistic_cel", "unscaled", False),  # its bound reads the data's row norms
])
def test_a_model_needing_unit_features_refuses_others(model, dataset, refused):
    registry = harness.Registry(harness.make_plugin_manager([_Plugin()], load_entrypoints=False))
    cfg = {"constraint": {"name": "kset", "k": 3}, "p_player": {"name": "uniform"},
           "w_player": {"name": "ogd"}, "model": {"name": model},
           "dataset": {"name": dataset}, "budget": 300, "tracking": {"enabled": False}}
    if not refused:
        harness.prepare(cfg, registry)
        return
    with pytest.raises(harness.ConfigError, match=r"model 'unit_features_logistic' .* data set "
                       r"'unscaled' has X\[5, 2\] = 1\.5 .* dataset\.scale=minmax"):
        harness.prepare(cfg, registry)
