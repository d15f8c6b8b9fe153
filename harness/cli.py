"""The ``minimax-bench`` command: a Hydra app over ``harness.prepare`` and ``harness.play``."""

from __future__ import annotations

import gc
import sys
from collections.abc import Mapping
from typing import Any

import hydra
from omegaconf import DictConfig

from harness.api import Prepared, play, prepare
from harness.config import config_dir, register_options, unknown_key, unknown_option
from harness.game import GuardError
from harness.joblog import recorded
from harness.params import ConfigError, RunSkipped, SetupError


def _progress_bar(enabled: bool, total: int) -> Any:
    if not enabled:
        return None
    from tqdm import tqdm

    # disable=None: shown on a terminal, silent when output is redirected; on the
    # terminal alone, not in the run's log (harness.joblog)
    return tqdm(total=total, unit="round", disable=None, mininterval=0.5, leave=False,
                dynamic_ncols=True, file=getattr(sys.stderr, "terminal", sys.stderr))


def summary(prepared: Prepared, metrics: Mapping[str, float]) -> str:
    """The end-of-run summary: the run's own rows, then the plugins' ``summary_lines``."""
    run = prepared.context.parts
    names, k = run.names, run.constraint.k
    who = (f"{names['p_player']} vs {names['w_player']}" if run.solver is None
           else f"solver {names['solver']}")
    # a set that names itself (e.g. "extremile r=2") is not read as an average top-k loss
    label = prepared.context.tags.get("constraint_label")
    lines = [
        f"minimax-bench: {who} on {names['dataset']} "
        f"({names['constraint']}, {label or f'k={k}'}, model {names['model']}, "
        f"seed {prepared.seed})",
    ]
    problem = run.problem
    plain = problem.mu == 0.0 and problem.nu == 0.0
    rows = [
        ("certified dual gap", metrics.get("dual_gap")),
        (f"objective ({label}, scaled)" if plain and label else
         f"objective (avg top-{k} loss, scaled)" if plain else
         f"objective F (mu={problem.mu:.3g}, nu={problem.nu:.3g}"
         f"{', ' + problem.penalty if problem.nu and problem.penalty != 'chi2' else ''})",
         metrics.get("objective")),
        ("accuracy", metrics.get("accuracy")),
        (f"MSE of the {k} largest losses", metrics.get("topk_mse")),
        ("theory bound", metrics.get("theory_bound")),
    ]
    lines += [_row(label, f"{value:.6g}") for label, value in rows if value is not None]
    absent = getattr(prepared.game, "theory_absent", None)
    if run.solver is None and "theory_bound" not in metrics and absent:
        lines.append(_row("theory bound", f"none: {absent}"))
    if run.resumed_from is not None:
        lines.append(_row("resumed from round", f"{run.resumed_from:,}"))
    steps = (f"in {int(metrics.get('rounds', 0)):,} rounds" if run.solver is None else
             f"({metrics.get('passes', 0.0):.3g} passes, "
             f"{int(metrics.get('grad_evals', 0)):,} gradient evaluations)")
    lines.append(_row("data points processed",
                      f"{int(metrics.get('data_points', 0)):,} {steps}, "
                      f"{metrics.get('wall_time_s', 0.0):.3g} s"))
    compiled = metrics.get("compile_time_s", 0.0)
    if compiled >= 0.05:  # loading cached kernels takes a few hundredths of a second
        lines.append(_row("kernels compiled or loaded (untimed)", f"{compiled:.3g} s"))
    lines += [_row(label, text) for label, text in plugin_lines(prepared, "FINISHED", metrics)]
    return "\n".join(lines)


def _row(label: str, text: str) -> str:
    return f"  {label:<36} {text}" if label else f"  {text}"


def plugin_lines(prepared: Prepared, status: str,
                 metrics: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The ``(label, text)`` lines the plugins add to the summary, in hook call order."""
    results = prepared.registry.pm.hook.summary_lines(
        context=prepared.context, status=status, metrics=metrics)
    return [(str(label), str(text)) for lines in results for label, text in lines or ()]


def interrupted(prepared: Prepared) -> str:
    """The notice of an interrupted run, with the plugins' ``summary_lines``."""
    metrics = prepared.game.state.last_metrics if prepared.game is not None else {}
    # this run's last save, or the state it resumed from (a stale file of an
    # earlier run is not this run's)
    at = prepared.saved_round if prepared.saved_round is not None else prepared.resumed_from
    saved = at is not None and prepared.state_file is not None and prepared.state_file.is_file()
    if saved:
        text = (f"minimax-bench: interrupted at round {prepared.context.parts.rounds:,}; its "
                f"state at round {at:,} (its last save, at a checkpoint) is saved: run the "
                "same command with resume=true to continue")
    elif prepared.state_file is None:
        text = "minimax-bench: interrupted; no state is saved (state_dir=null): it cannot resume"
    else:
        text = ("minimax-bench: interrupted before its first checkpoint; nothing is saved to "
                "resume from: run the same command again")
    for label, line in plugin_lines(prepared, "KILLED", metrics):
        text += f"; {label} {line}" if label else f"; {line}"
    return text


def task(cfg: DictConfig) -> float | None:
    """One game from a composed config; returns the final certified gap (for
    sweepers). What it prints also goes to the run folder's log (``harness.joblog``)."""
    with recorded():
        return run_task(cfg).get("dual_gap")


def run_task(cfg: DictConfig, *, failures: bool = False) -> dict[str, float]:
    """One run from a composed config, with its summary printed; returns its
    final metrics (those of the FINISHED run that ``resume=true`` found, when it
    is skipped). A bad config or a setup error (e.g. data that cannot be read)
    exits 2. A run that fails while playing (a guard: a non-finite iterate or
    loss, a numeric error) raises, unless ``failures``: then its error is
    printed and ``{"failed": 1.0}`` returned (a tuning grid goes on past a step
    size that diverges)."""
    try:
        prepared = prepare(cfg)
    except RunSkipped as skipped:  # found before anything was prepared
        print(f"minimax-bench: {skipped}")
        return dict(skipped.metrics)
    except (ConfigError, SetupError) as err:  # (a plugin's before_prepare may set up too)
        print(f"minimax-bench: error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    except KeyboardInterrupt:  # (compiling kernels can take half a minute on a first use)
        print("minimax-bench: interrupted while preparing the run; nothing was recorded.",
              file=sys.stderr)
        raise SystemExit(130) from None
    bar = _progress_bar(bool(cfg.get("progress", True)), prepared.horizon)
    try:
        try:
            metrics = play(prepared, None if bar is None else lambda t: bar.update(t - bar.n))
        finally:
            if bar is not None:
                bar.close()
    except RunSkipped as skipped:  # e.g. resume=true and the run already finished
        print(f"minimax-bench: {skipped}")
        return dict(skipped.metrics)
    except ConfigError as err:
        print(f"minimax-bench: error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    except SetupError as err:
        print(f"minimax-bench: error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    except (GuardError, ArithmeticError) as err:
        if not failures:
            raise
        print(f"minimax-bench: error: {err}", file=sys.stderr)
        return {"failed": 1.0}
    except KeyboardInterrupt:
        print(interrupted(prepared), file=sys.stderr)
        raise SystemExit(130) from None
    print(summary(prepared, metrics))
    return dict(metrics)


def tuning_task(cfg: DictConfig) -> dict[str, float]:
    """The task of the tuning sweeper (``hydra/sweeper=tune``): ``run_task`` with
    failures returned, so the sweep goes on past a diverging step size; what it
    prints also goes to the job folder's log."""
    with recorded():
        return run_task(cfg, failures=True)


def main() -> None:
    """``minimax-bench [overrides]`` (after ``harness.command.main`` started
    the helpers): an unknown option of a config group, or an unknown config
    key, is one line and exit 2 (before Hydra's longer message); then Hydra's app.

    The objects that exist when the command starts (its modules) and when it
    ends are moved out of the cyclic garbage collector's reach
    (``gc.freeze``): they live as long as the process, and the collections
    of the run and of the interpreter's exit would otherwise walk them again
    and again (about a second at exit once MLflow is loaded). A plugin that
    loads many long-lived objects during a single run may freeze them too
    when ``gc.get_freeze_count()`` says the process does so (the MLflow
    tracker does).
    """
    gc.freeze()
    try:
        args = sys.argv[1:]
        message = unknown_option(args) or unknown_key(args)
        if message is not None:
            print(f"minimax-bench: error: {message}", file=sys.stderr)
            raise SystemExit(2)
        hydra.main(version_base="1.3", config_path=config_dir(), config_name="config")(task)()
    finally:
        gc.freeze()


# Options generated from the registry, stored when this module is imported: a
# launcher that composes each job's config in a process of its own (submitit)
# imports it to unpickle the task function.
register_options()


if __name__ == "__main__":
    main()
