"""FeatureEncoding: one-hot for few levels, ordinal codes (native categories of
histogram boosting) for more, in the search and in the final model."""

import numpy as np
import pandas as pd
import pytest
import skops.io
from sklearn.ensemble import HistGradientBoostingRegressor

from ensemble_bo.core.encoding import (
    MAX_ONE_HOT_LEVELS,
    MAX_ORDINAL_LEVELS,
    FeatureEncoding,
)
from ensemble_bo.core.estimator import build_ensemble_model
from ensemble_bo.core.evaluation import out_of_fold_predictions
from ensemble_bo.core.methods import run_method
from ensemble_bo.core.preparation import ModelInput, prepare
from ensemble_bo.core.seeding import derive_seed
from ensemble_bo.core.zoo import make_model
from tests.support import cheap_parameters

HGB_CONFIG = {
    "learning_rate": 0.3,
    "max_leaf_nodes": 4,
    "min_samples_leaf": 2,
    "l2_regularization": 0.01,
    "max_features": 1.0,
    "max_iter": 20,
    "early_stopping": False,
}
# city: 4 levels (ordinal-coded above 3), colour: 2 levels (one-hot), x: numeric
TRAIN = pd.DataFrame(
    {
        "city": ["Oslo", "Bern", "Rome", "Bern", "Lima", np.nan],
        "colour": ["red", "blue", "red", "red", "blue", "blue"],
        "x": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
    }
)


def test_columns_of_more_levels_than_the_limit_are_ordinal_coded():
    encoding = FeatureEncoding.choose(TRAIN, ["city", "colour"], max_one_hot_levels=3)
    assert encoding == FeatureEncoding(one_hot=("colour",), ordinal=("city",))
    # a missing value is no level: city has 4, so a limit of 4 one-hot encodes it
    assert FeatureEncoding.choose(TRAIN, ["city", "colour"], 4).ordinal == ()
    assert FeatureEncoding.choose(TRAIN, ["colour"]) == FeatureEncoding(("colour",))
    assert MAX_ONE_HOT_LEVELS == 10


def test_the_encoder_gives_codes_first_then_one_hots_then_numbers():
    encoding = FeatureEncoding(one_hot=("colour",), ordinal=("city",))
    encoder = encoding.encoder().fit(TRAIN)
    # codes in sorted order of the levels: Bern 0, Lima 1, Oslo 2, Rome 3;
    # one-hot columns blue, red; a missing city is a missing code
    expected = np.array(
        [
            [2.0, 0.0, 1.0, 1.0],
            [0.0, 1.0, 0.0, 2.0],
            [3.0, 0.0, 1.0, 3.0],
            [0.0, 0.0, 1.0, 4.0],
            [1.0, 1.0, 0.0, 5.0],
            [np.nan, 1.0, 0.0, 6.0],
        ]
    )
    np.testing.assert_array_equal(encoder.transform(TRAIN), expected)
    assert list(encoder.get_feature_names_out()) == [
        "city",
        "colour_blue",
        "colour_red",
        "x",
    ]
    assert encoding.categorical_features == (0,)


def test_unknown_categories_at_prediction_are_a_missing_code_or_no_one_hot():
    encoder = FeatureEncoding(one_hot=("colour",), ordinal=("city",)).encoder()
    encoder.fit(TRAIN)
    unseen = pd.DataFrame(
        {"city": ["Kyiv", "Rome"], "colour": ["green", "red"], "x": [0.5, 7.0]}
    )
    np.testing.assert_array_equal(
        encoder.transform(unseen), [[np.nan, 0.0, 0.0, 0.5], [3.0, 0.0, 1.0, 7.0]]
    )


def test_the_rarest_levels_share_one_code_beyond_what_boosting_takes():
    # level i occurs i + 1 times: the rarest ones are pooled into the last code
    levels = [f"v{i:03d}" for i in range(300) for _ in range(i + 1)]
    frame = pd.DataFrame({"id_like": levels})
    codes = FeatureEncoding(ordinal=("id_like",)).encoder().fit_transform(frame)
    assert np.nanmax(codes) == MAX_ORDINAL_LEVELS - 1
    assert len(np.unique(codes)) == MAX_ORDINAL_LEVELS


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "10", None])
def test_a_bad_level_limit_is_refused_naming_it(bad):
    with pytest.raises(ValueError, match=rf"integer >= 1, got {bad!r}"):
        FeatureEncoding.choose(TRAIN, ["city"], bad)


@pytest.mark.parametrize(
    ("name", "config"),
    [
        ("hist_gradient_boosting_regressor", HGB_CONFIG),
        ("segor_sklearn", {"regressor": "hist_gradient_boosting", **HGB_CONFIG}),
    ],
)
def test_histogram_boosting_is_told_the_code_columns(name, config):
    if name == "segor_sklearn":  # its own names for boosting's settings
        config = {
            (
                "hist_gradient_boosting__" + key
                if key in ("min_samples_leaf", "max_iter")
                else key
            ): value
            for key, value in config.items()
        }
    told = make_model(name, config, 0, categorical_features=(0, 2))
    assert told.get_params()["categorical_features"] == [0, 2]
    untold = make_model(name, config, 0)
    assert untold.get_params()["categorical_features"] == "from_dtype"


def test_other_learners_take_the_codes_as_numbers():
    forest = {
        "n_estimators": 5,
        "bootstrap": True,
        "max_features": 1.0,
        "method": "breiman",
    }
    told = make_model("random_forest_regressor", forest, 0, categorical_features=(0,))
    assert (
        told.get_params()
        == make_model("random_forest_regressor", forest, 0).get_params()
    )


def _parity_data(n=60):
    """12 levels whose effect alternates with the code: a set of levels, no order."""
    rng = np.random.default_rng(0)
    codes = np.arange(n) % 12
    X = np.column_stack([codes, rng.normal(size=n)]).astype(float)
    y = np.where(codes % 2 == 0, 1.0, -1.0) + 0.1 * rng.normal(size=n)
    return X, y, np.arange(n) % 5


def test_the_search_trains_histogram_boosting_on_the_code_columns_as_categories():
    X, y, folds = _parity_data()
    data = ModelInput(
        X,
        y,
        folds,
        "regression",
        {"mean": 0.0, "std": 1.0},
        {"name": "parity", "categorical_columns": ["level"]},
        FeatureEncoding(ordinal=("level",)),
    )
    parameters = cheap_parameters()
    parameters["budget"] = 2
    parameters["random_search"] = {
        **parameters["random_search"],
        "model": "hist_gradient_boosting_regressor",
        "time_limit": None,
    }
    result = run_method("random_search", data, parameters, seed=0)
    model_seed = derive_seed(0, "models")
    for trial, config in enumerate(result.pool.configs):

        def cross_validated(categorical, config=config):
            model = make_model(
                "hist_gradient_boosting_regressor", config, model_seed, categorical
            )
            return out_of_fold_predictions(model, X, y, folds)[0]

        native = cross_validated((0,))
        np.testing.assert_array_equal(result.pool.predictions[trial], native)
        assert not np.array_equal(native, cross_validated(()))


def test_the_final_model_encodes_as_the_search_and_round_trips_through_skops():
    rng = np.random.default_rng(1)
    n = 120
    raw = pd.DataFrame(
        {
            "district": rng.choice([f"d{i:02d}" for i in range(14)], size=n),
            "heating": rng.choice(["gas", "oil"], size=n),
            "area": rng.normal(100.0, 20.0, size=n),
        }
    )
    effect = raw["district"].str[1:].astype(int) % 3
    raw["target"] = raw["area"] + 30.0 * effect + rng.normal(size=n)
    options = {
        "target": "target",
        "task": "regression",
        "test_size": 0.33,
        "n_folds": 3,
    }
    split, data = prepare(raw, "houses", options, 0)
    assert data.encoding == FeatureEncoding(one_hot=("heating",), ordinal=("district",))
    assert split.info["ordinal_columns"] == ["district"]
    assert split.info["encoded_features"] == data.features.shape[1] == 4
    members = [
        make_model("hist_gradient_boosting_regressor", HGB_CONFIG, 0, (0,)),
        make_model("decision_tree_regressor", {"max_depth": 4}, 0),
    ]
    model = build_ensemble_model("regression", members, [0.5, 0.5], data.encoding)
    model.fit(split.train_features, split.train_target)
    boosting = model.regressor_.named_steps["ensemble"].estimators_[0]
    assert isinstance(boosting, HistGradientBoostingRegressor)
    assert boosting.is_categorical_.tolist() == [True, False, False, False]
    # the encoded training part is the search's model input
    np.testing.assert_array_equal(
        model.regressor_.named_steps["encode"].transform(split.train_features),
        data.features,
    )

    saved = skops.io.dumps(model)
    loaded = skops.io.loads(saved, trusted=skops.io.get_untrusted_types(data=saved))
    test = split.test_features.assign(
        district=["d99"] + list(split.test_features["district"][1:])
    )
    np.testing.assert_array_equal(loaded.predict(test), model.predict(test))
    assert np.isfinite(loaded.predict(test)).all()  # d99 was never seen
