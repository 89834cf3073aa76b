"""Model search pipelines: one search strategy, then refit, scoring and reports.

`create_pipeline("segor")` searches an ensemble by SEGOR, `"sego"` by SEGO,
`"esmbo"` by ESMBO; any other method name searches the single best model with
the optimizer its parameters name (`smbo`: GP-EI, `random_search`: random).
Each method reads `params:<method>` and writes `<method>_*` datasets (see the
catalog's dataset factories).
"""

from kedro.pipeline import Node, Pipeline

from .nodes import (
    refit_and_score,
    report_search,
    search_esmbo,
    search_sego,
    search_segor,
    search_single_best,
    select_agnostic_bayes,
    select_posthoc,
)

# Method -> (search node function, parameters it reads besides its own); any
# other method searches the single best model.
SEARCHES = {
    "segor": (search_segor, ["params:ensemble"]),
    "sego": (search_sego, []),
    "esmbo": (search_esmbo, []),
}
DATA = ["model_input_features", "model_input_target", "cv_folds", "dataset_info"]
MODEL_SPACES = ["params:models", "params:default_models"]


def create_pipeline(method: str = "segor", **kwargs) -> Pipeline:
    function, extra = SEARCHES.get(method, (search_single_best, []))
    search = Node(
        function,
        inputs=[
            *DATA,
            f"params:{method}",
            *MODEL_SPACES,
            *extra,
            "params:budget",
            "params:seed",
        ],
        outputs=f"{method}_search_result",
        name=f"{method}_search",
    )
    return Pipeline([search]) + _refit_and_report(method)


def create_ers_pipeline(**kwargs) -> Pipeline:
    """ERS (ESMBO s.6): random search, then the agnostic Bayes ensemble of its pool."""
    search = Node(
        search_single_best,
        inputs=[*DATA, "params:ers", *MODEL_SPACES, "params:budget", "params:seed"],
        outputs="ers_candidates",
        name="ers_search",
    )
    weigh = Node(
        select_agnostic_bayes,
        inputs=[
            "ers_candidates",
            "model_input_target",
            "cv_folds",
            "params:ers",
            "params:seed",
        ],
        outputs="ers_search_result",
        name="ers_select",
    )
    return Pipeline([search, weigh]) + _refit_and_report("ers")


def create_posthoc_pipeline(**kwargs) -> Pipeline:
    """Post-hoc selection from the saved pool of an earlier run (`posthoc_source`)."""
    select = Node(
        select_posthoc,
        inputs=[
            "posthoc_source_result",
            "model_input_target",
            "cv_folds",
            "params:posthoc_source",
            "params:posthoc",
        ],
        outputs="posthoc_search_result",
        name="posthoc_select",
    )
    return Pipeline([select]) + _refit_and_report("posthoc")


def _refit_and_report(method: str) -> Pipeline:
    return Pipeline(
        [
            Node(
                refit_and_score,
                inputs=[
                    f"{method}_search_result",
                    "train_features",
                    "train_target",
                    "test_features",
                    "test_target",
                    "dataset_info",
                    "target_scaling",
                    "params:voting",
                    "params:seed",
                ],
                outputs=[f"{method}_model", f"{method}_test_metrics"],
                name=f"{method}_refit_and_score",
            ),
            Node(
                report_search,
                inputs=[f"{method}_search_result", "dataset_info", f"params:{method}"],
                outputs=[
                    f"{method}_trial_history",
                    f"{method}_ensemble_composition",
                    f"{method}_convergence_plot",
                    f"{method}_diversity_heatmap",
                    f"{method}_diversity",
                ],
                name=f"{method}_report",
            ),
        ]
    )
