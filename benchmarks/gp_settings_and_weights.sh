#!/bin/bash
# The GP settings (map, ml2, slice, the paper preset) and the final weights
# (counts, BFGS) on the results grid's tree space and SEGO s.4.2's
# classification space, 3 repetitions, budget 50 (the grid of
# conf/classification_objectives with each setting's datasets and methods).
# Each setting's cells are moved to a folder of their own (the pipeline stores
# them under the same method names), then benchmarks/cell_comparison.py
# compares every setting with the default. Writes
# benchmarks/results/{gp_settings,final_weights}_{trees,classification}.{md,json},
# classification_targets.{md,json} and their *_cells.csv. About 90 minutes on
# 2 cores (594 cells).
#   bash benchmarks/gp_settings_and_weights.sh
set -euo pipefail
cd "$(dirname "$0")/.."
STORE=data/07_model_output/benchmark_cells
OUT=data/gp_settings_and_weights
REGRESSION="cpu_performance hitters auto_mpg carseats diabetes boston concrete"
CLASSIFICATION="wine breast_cancer pima german_credit titanic car_good"
blocks="smbo segor esmbo sego"

run() {  # setting name, datasets, methods, extra --params
  local name=$1 datasets=$2 methods=$3 extra=${4:-}
  if [ -n "$(ls "$STORE"/*.json 2>/dev/null)" ]; then
    echo "$STORE holds cells of another grid: move them away first" >&2
    exit 1
  fi
  echo "=== $name $(date +%T)"
  .venv/bin/kedro run --pipelines=benchmark --env=classification_objectives --params \
    "benchmark.repetitions=3,benchmark.datasets=$datasets,benchmark.methods=$methods${extra:+,$extra}"
  mkdir -p "$OUT/$name" && mv "$STORE"/*.json "$OUT/$name/"
}
each() {  # key=value for every GP method's block
  local out=""
  for block in $blocks; do out="$out${out:+,}$block.$1"; done
  echo "$out"
}
BFGS="ensemble.weighting=bfgs,esmbo.weighting=bfgs,ers.weighting=bfgs,posthoc.weighting=bfgs,sego.weighting=bfgs"

run trees_map "$REGRESSION" "smbo smbo_posthoc esmbo ers segor:f-m"
for mode in ml2 slice; do
  run "trees_$mode" "$REGRESSION" "smbo esmbo segor:f-m" "$(each optimizer.hyperparameters=$mode)"
done
run trees_paper "$REGRESSION" "smbo esmbo segor:f-m" "$(each optimizer.preset=paper)"
run trees_bfgs "$REGRESSION" "smbo_posthoc esmbo ers segor:f-m" "$BFGS"
run cls_map "$CLASSIFICATION" "sego smbo_posthoc smbo smbo_posthoc:error"
for mode in ml2 slice; do
  run "cls_$mode" "$CLASSIFICATION" "sego smbo_posthoc" "$(each optimizer.hyperparameters=$mode)"
done
run cls_paper "$CLASSIFICATION" "sego smbo_posthoc" "$(each optimizer.preset=paper)"
run cls_bfgs "$CLASSIFICATION" "sego smbo_posthoc" "$BFGS"

compare() { .venv/bin/python benchmarks/cell_comparison.py --against-unsuffixed "$@" > /dev/null; }
compare --model decision_tree_regressor --name gp_settings_trees \
  --cells $OUT/trees_map --cells $OUT/trees_ml2=+ml2 --cells $OUT/trees_slice=+slice \
  --cells $OUT/trees_paper=+paper --methods smbo+ml2 smbo+slice smbo+paper \
  segor:f-m+ml2 segor:f-m+slice segor:f-m+paper esmbo+ml2 esmbo+slice esmbo+paper
compare --model sego_sklearn_paper --name gp_settings_classification \
  --cells $OUT/cls_map --cells $OUT/cls_ml2=+ml2 --cells $OUT/cls_slice=+slice \
  --cells $OUT/cls_paper=+paper --methods sego+ml2 sego+slice sego+paper \
  smbo_posthoc+ml2 smbo_posthoc+slice smbo_posthoc+paper
compare --model decision_tree_regressor --name final_weights_trees \
  --cells $OUT/trees_map --cells $OUT/trees_bfgs=+bfgs \
  --methods segor:f-m+bfgs esmbo+bfgs ers+bfgs smbo_posthoc+bfgs
compare --model sego_sklearn_paper --name final_weights_classification \
  --cells $OUT/cls_map --cells $OUT/cls_bfgs=+bfgs --methods sego+bfgs smbo_posthoc+bfgs
# The classification targets: every setting against error-rate post-hoc
# selection and the single best.
.venv/bin/python benchmarks/cell_comparison.py --model sego_sklearn_paper \
  --name classification_targets --baselines smbo_posthoc:error smbo \
  --cells $OUT/cls_map --cells $OUT/cls_ml2=+ml2 --cells $OUT/cls_slice=+slice \
  --cells $OUT/cls_paper=+paper --cells $OUT/cls_bfgs=+bfgs > /dev/null
echo "done $(date +%T)"
