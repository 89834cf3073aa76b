"""segor: SEGOR search, refit of the ensemble and the single best, reports."""

from kedro.pipeline import Node, Pipeline

from .nodes import refit_and_score, report_search, search_ensemble


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            Node(
                search_ensemble,
                inputs=[
                    "model_input_features",
                    "model_input_target",
                    "cv_folds",
                    "dataset_info",
                    "params:segor",
                    "params:ensemble",
                    "params:budget",
                    "params:seed",
                ],
                outputs="segor_search_result",
                name="segor_search",
            ),
            Node(
                refit_and_score,
                inputs=[
                    "segor_search_result",
                    "train_features",
                    "train_target",
                    "test_features",
                    "test_target",
                    "dataset_info",
                    "target_scaling",
                    "params:segor",
                    "params:seed",
                ],
                outputs=["segor_model", "segor_test_metrics"],
                name="segor_refit_and_score",
            ),
            Node(
                report_search,
                inputs=["segor_search_result", "dataset_info"],
                outputs=[
                    "segor_trial_history",
                    "segor_ensemble_composition",
                    "segor_convergence_plot",
                    "segor_diversity_heatmap",
                    "segor_diversity",
                ],
                name="segor_report",
            ),
        ]
    )
