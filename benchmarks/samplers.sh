#!/bin/bash
# Which optimizer kind (gp, tpe, rf) gives the best ensembles? SEGOR (f-m) and
# the single best (smbo) on the regression grid of conf/samplers (7 datasets,
# decision tree and SVR spaces, 5 repetitions, budget 50), once per kind. Each
# kind's cells are moved to a folder of their own, then
# benchmarks/cell_comparison.py compares tpe and rf with gp, cell by cell.
# Writes benchmarks/results/samplers_{decision_tree_regressor,svr}.{md,json}
# and *_cells.csv. About 14 minutes on 2 cores (420 cells).
#   bash benchmarks/samplers.sh
set -euo pipefail
cd "$(dirname "$0")/.."
STORE=data/07_model_output/benchmark_cells
OUT=data/samplers

for kind in gp tpe rf; do
  if [ -d "$OUT/$kind" ]; then
    echo "=== $kind: kept from an earlier run ($OUT/$kind)"
    continue
  fi
  if [ -n "$(ls "$STORE"/*.json 2>/dev/null)" ]; then
    echo "$STORE holds cells of another grid: move them away first" >&2
    exit 1
  fi
  echo "=== $kind $(date +%T)"
  .venv/bin/kedro run --pipelines=benchmark --env=samplers \
    --params "segor.optimizer.kind=$kind,smbo.optimizer.kind=$kind"
  mkdir -p "$OUT/$kind" && mv "$STORE"/*.json "$OUT/$kind/"
done

for model in decision_tree_regressor svr; do
  .venv/bin/python benchmarks/cell_comparison.py --against-unsuffixed \
    --model $model --name "samplers_$model" \
    --cells $OUT/gp --cells $OUT/tpe=+tpe --cells $OUT/rf=+rf \
    --methods smbo+tpe smbo+rf segor:f-m+tpe segor:f-m+rf > /dev/null
done
echo "done $(date +%T)"
