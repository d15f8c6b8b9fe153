"""The ``minimax-bench`` command: a Hydra app over ``harness.prepare`` and ``harness.play``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig

from harness.api import play, prepare
from harness.params import ConfigError, SetupError


def config_dir() -> str:
    """The config tree: inside the installed package, or ``conf/`` of a source checkout."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "conf", here.parent / "conf"):
        if (candidate / "config.yaml").is_file():
            return str(candidate)
    raise FileNotFoundError(f"minimax-bench config tree not found near {here}")


def _progress_bar(enabled: bool, total: int) -> Any:
    if not enabled:
        return None
    from tqdm import tqdm

    # disable=None: shown on a terminal, silent when output is redirected
    return tqdm(total=total, unit="round", disable=None, mininterval=0.5, leave=False,
                dynamic_ncols=True)


def summary(prepared: Any, metrics: dict[str, float]) -> str:
    names = prepared.parts.names
    k = prepared.parts.constraint.k
    lines = [
        f"minimax-bench: {names['p_player']} vs {names['w_player']} on {names['dataset']} "
        f"({names['constraint']}, k={k}, model {names['model']}, seed {prepared.seed})",
    ]
    rows = [
        ("certified dual gap", metrics.get("dual_gap")),
        (f"objective (avg top-{k} loss, scaled)", metrics.get("objective")),
        ("accuracy", metrics.get("accuracy")),
        (f"MSE of the {k} largest losses", metrics.get("topk_mse")),
        ("theory bound", metrics.get("theory_bound")),
        ("suboptimality (objective - OPT)", metrics.get("suboptimality")),
    ]
    lines += [f"  {label:<36} {value:.6g}" for label, value in rows if value is not None]
    opt_text = _opt_text(prepared.context.params)
    if opt_text:
        lines.append(f"  {'exact optimum OPT':<36} {opt_text}")
    resumed = prepared.context.state.get("resumed_from_round")
    if resumed is not None:
        lines.append(f"  {'resumed from round':<36} {resumed:,}")
    lines.append(f"  {'data points processed':<36} {int(metrics.get('data_points', 0)):,} "
                 f"in {int(metrics.get('rounds', 0)):,} rounds, "
                 f"{metrics.get('wall_time_s', 0.0):.1f} s")
    handle = prepared.context.state.get("mlflow")
    if handle is not None:
        uri = handle["uri"]
        lines.append(f"  {'MLflow run':<36} {handle['run_id']} "
                     f"(experiment id {handle['experiment_id']}) in {uri}")
        if not uri.startswith("http"):
            lines.append(f"  open it with:  mlflow ui --backend-store-uri {uri}  then "
                         f"http://127.0.0.1:5000/#/experiments/{handle['experiment_id']}"
                         f"/runs/{handle['run_id']}")
        else:
            lines.append(f"  open it at:    {uri.rstrip('/')}/#/experiments/"
                         f"{handle['experiment_id']}/runs/{handle['run_id']}")
    return "\n".join(lines)


def _opt_text(params: dict[str, Any]) -> str | None:
    """OPT and where it came from, or why it is unavailable (None: not asked for)."""
    status = params.get("opt_status")
    if status is None:
        return None
    if "opt" in params:
        return f"{params['opt']:.6g} ({params['opt_solver']}, {status})"
    return f"unavailable ({status}): {params.get('opt_message', '')}"


def sweep_record() -> dict[str, Any]:
    """What a sweep-level callback left for the jobs in ``<sweep dir>/sweep.json`` (or {})."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        return {}
    hc = HydraConfig.get()
    if hc.mode != RunMode.MULTIRUN:
        return {}
    path = Path(hc.sweep.dir) / "sweep.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def interrupted(prepared: Any) -> str:
    game = prepared.context.state.get("game")
    done = game.state.rounds if game is not None else 0
    text = (f"minimax-bench: interrupted; its state at round {done:,} (the last checkpoint) "
            "is saved: run the same command with resume=true to continue")
    handle = prepared.context.state.get("mlflow")
    if handle is not None:
        text += (f"; MLflow run {handle['run_id']} is marked KILLED with the checkpoints "
                 "logged so far")
    return text


def task(cfg: DictConfig) -> float | None:
    """One game from a composed config; returns the final certified gap (for sweepers)."""
    try:
        prepared = prepare(cfg)
    except ConfigError as err:
        print(f"minimax-bench: error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    prepared.context.state["sweep"] = sweep_record()
    bar = _progress_bar(bool(cfg.get("progress", True)), prepared.horizon)
    try:
        metrics = play(prepared, None if bar is None else lambda t: bar.update(t - bar.n))
    except (ConfigError, SetupError) as err:
        if bar is not None:
            bar.close()
        print(f"minimax-bench: error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        if bar is not None:
            bar.close()
        print(interrupted(prepared), file=sys.stderr)
        raise SystemExit(130) from None
    finally:
        if bar is not None:
            bar.close()
    print(summary(prepared, metrics))
    return metrics.get("dual_gap")


def main() -> None:
    hydra.main(version_base="1.3", config_path=config_dir(), config_name="config")(task)()


if __name__ == "__main__":
    main()
