#!/usr/bin/env bash
# The paper's Figures 2 and 3 (Section 6) end to end: both presets (OL-EXP.4M,
# OL-FTRL, S-AFL; k = 20; 1e7 data points; 5 seeds), then the report of each.
#   tools/reproduce_paper.sh [output folder]     (default: paper-results)
# Runs go to the MLflow store given by MLFLOW_TRACKING_URI, else
# <output folder>/mlflow.db. With the parallel extra installed, set
# LAUNCHER="hydra/launcher=joblib hydra.launcher.n_jobs=2" to use both cores.
set -euo pipefail
out="${1:-paper-results}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
export MLFLOW_TRACKING_URI="${MLFLOW_TRACKING_URI:-sqlite:///$out/mlflow.db}"
for preset in paper_cancer paper_boston; do
  start=$(date +%s)
  # shellcheck disable=SC2086
  minimax-bench experiment="$preset" hydra.sweep.dir="$out/multirun/$preset" ${LAUNCHER:-}
  echo "$preset: $(( $(date +%s) - start )) s wall"
  minimax-bench-report --experiment "$preset" --out "$out/report/$preset"
done
echo "figures and tables in $out/report; runs in $MLFLOW_TRACKING_URI"
