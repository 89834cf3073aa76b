"""data_processing: raw table -> train/test split, model input (encoded, CV folds),
and the search's input (a sample of large data)."""

from kedro.pipeline import Node, Pipeline

from ensemble_bo.validation import RAW_DATASET

from .nodes import make_model_input, sample_search_input, validate_and_split


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            Node(
                validate_and_split,
                inputs=[
                    RAW_DATASET,
                    "params:dataset",
                    "params:data_processing",
                    "params:seed",
                ],
                outputs={
                    name: name
                    for name in (
                        "dataset_info",
                        "train_features",
                        "train_target",
                        "test_features",
                        "test_target",
                    )
                },
                name="validate_and_split",
            ),
            Node(
                make_model_input,
                inputs=[
                    "train_features",
                    "train_target",
                    "dataset_info",
                    "params:data_processing",
                    "params:seed",
                ],
                outputs="model_input",
                name="make_model_input",
            ),
            Node(
                sample_search_input,
                inputs=["model_input", "params:max_search_rows", "params:seed"],
                outputs="search_input",
                name="sample_search_input",
            ),
        ]
    )
