"""Model search pipelines, one per method of the registry (core/methods.py).

`create_pipeline(method)`: the method's search (and selection stage), then the
refit, the test scores and the reports. `create_selection_pipeline(selection)`:
a selection stage over the pool an earlier run saved (`<name>_source`). Each
writes `<name>_*` datasets and its reports, `<name>_<report>#<kind>` for each
of reporting.SEARCH_REPORTS (see the catalog's dataset factories).
"""

from kedro.pipeline import Node, Pipeline

from ensemble_bo.core.methods import Method, Selection
from ensemble_bo.reporting import SEARCH_REPORTS, report_dataset

from .nodes import (
    display_name_blocks,
    importance_report,
    refit_and_score,
    report_node,
    search_node,
    selection_node,
    uncertainty_report,
)

# What the refit node's final model is, which a time budget keeps time for.
FINAL_FIT_PARAMS = (
    "final_model",
    "conformal",
    "conformal_rows",
    "split_conformal_above",
)


def _params(names) -> dict[str, str]:
    return {name: f"params:{name}" for name in names}


def create_pipeline(method: Method, **kwargs) -> Pipeline:
    search = Node(
        search_node(method),
        inputs={
            "model_input": "search_input",
            "training_input": "model_input",
            "seed": "params:seed",
            "journals": "search_journals",
            "resume": "params:resume",
            **_params(FINAL_FIT_PARAMS),
            **_params(method.params),
        },
        outputs=f"{method.name}_search_result",
        name=f"{method.name}_search",
    )
    return Pipeline([search]) + _refit_and_report(
        method.name, display_name_blocks(method)
    )


def create_selection_pipeline(selection: Selection, **kwargs) -> Pipeline:
    select = Node(
        selection_node(selection),
        inputs=[
            f"{selection.name}_source_result",
            "search_input",
            f"params:{selection.name}_source",
            f"params:{selection.params}",
            "params:seed",
            "params:inference",
        ],
        outputs=f"{selection.name}_search_result",
        name=f"{selection.name}_select",
    )
    return Pipeline([select]) + _refit_and_report(selection.name, (selection.params,))


def _refit_and_report(name: str, display_name_blocks: tuple[str, ...]) -> Pipeline:
    return Pipeline(
        [
            Node(
                refit_and_score,
                inputs=[
                    f"{name}_search_result",
                    "search_input",
                    "model_input",
                    "train_features",
                    "train_target",
                    "test_features",
                    "test_target",
                    "params:voting",
                    "params:seed",
                    "params:final_model",
                    "params:stacking",
                    "params:conformal",
                    "params:conformal_rows",
                    "params:split_conformal_above",
                    "params:max_search_rows",
                ],
                outputs=[f"{name}_model", f"{name}_test_metrics"],
                name=f"{name}_refit_and_score",
            ),
            Node(
                uncertainty_report,
                inputs=[
                    f"{name}_model",
                    "model_input",
                    "test_features",
                    "test_target",
                ],
                outputs=f"{name}_uncertainty_plot#figure",
                name=f"{name}_uncertainty_plot",
            ),
            Node(
                importance_report,
                inputs=[
                    f"{name}_model",
                    "model_input",
                    "test_features",
                    "test_target",
                    "params:seed",
                ],
                outputs=[
                    f"{name}_feature_importance#table",
                    f"{name}_feature_importance_plot#figure",
                ],
                name=f"{name}_feature_importance",
            ),
            Node(
                report_node(display_name_blocks),
                inputs={
                    "search_result": f"{name}_search_result",
                    "model_input": "search_input",
                    **_params(display_name_blocks),
                },
                outputs={
                    report: report_dataset(name, report) for report in SEARCH_REPORTS
                },
                name=f"{name}_report",
            ),
        ]
    )
