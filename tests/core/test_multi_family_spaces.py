"""segor_sklearn (every regression family in one conditional space), histogram
gradient boosting alone and as a choice of sego_sklearn."""

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.ensemble import (
    ExtraTreesRegressor,
    GradientBoostingRegressor,
    HistGradientBoostingClassifier,
    HistGradientBoostingRegressor,
    RandomForestRegressor,
)
from sklearn.impute import SimpleImputer
from sklearn.linear_model import ElasticNet
from sklearn.neighbors import KNeighborsRegressor
from sklearn.neural_network import MLPRegressor
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVR
from sklearn.tree import DecisionTreeRegressor

from ensemble_bo.core.space import SearchSpace, parameter_from_spec
from ensemble_bo.core.zoo import (
    MissingSettingError,
    make_model,
    model_task,
    takes_missing_values,
)

PROJECT = Path(__file__).resolve().parents[2]
MODELS = yaml.safe_load((PROJECT / "conf/base/parameters_models.yml").read_text())[
    "models"
]
SEGOR = SearchSpace.from_dict(MODELS["segor_sklearn"])
SEGO = SearchSpace.from_dict(MODELS["sego_sklearn"])
HGB_SETTINGS = {
    "learning_rate",
    "max_features",
    "max_leaf_nodes",
    "hist_gradient_boosting__min_samples_leaf",
    "l2_regularization",
    "hist_gradient_boosting__max_iter",
    "early_stopping",
}
# Each regressor of segor_sklearn: its estimator, whether a scaler comes first,
# and the settings of its configurations (units_2 and the Huber quantile only
# under their own conditions).
SEGOR_FAMILIES = {
    "hist_gradient_boosting": (HistGradientBoostingRegressor, False, HGB_SETTINGS),
    "random_forest": (
        RandomForestRegressor,
        False,
        {"max_features", "bootstrap", "n_estimators"},
    ),
    "extra_trees": (
        ExtraTreesRegressor,
        False,
        {"max_features", "bootstrap", "n_estimators"},
    ),
    "gradient_boosting": (
        GradientBoostingRegressor,
        False,
        {"learning_rate", "n_estimators", "gradient_boosting__max_depth", "loss"},
    ),
    "svr": (SVR, True, {"C", "gamma", "epsilon"}),
    "knn": (KNeighborsRegressor, True, {"n_neighbors"}),
    "elastic_net": (
        ElasticNet,
        True,
        {"elastic_net__alpha", "l1_ratio", "elastic_net__max_iter"},
    ),
    "mlp": (
        MLPRegressor,
        True,
        {
            "learning_rate_init",
            "activation",
            "n_hidden_layers",
            "units_1",
            "mlp__max_iter",
        },
    ),
    "decision_tree": (
        DecisionTreeRegressor,
        False,
        {
            "decision_tree__max_depth",
            "decision_tree__max_features",
            "min_samples_split",
            "decision_tree__min_samples_leaf",
        },
    ),
}
NESTED = {
    "units_2": ("n_hidden_layers", 2),
    "gradient_boosting__alpha": ("loss", "huber"),
}


def load(name, rows):
    raw = pd.read_csv(PROJECT / "data/01_raw" / f"{name}.csv")
    raw = raw.sample(rows, random_state=0)
    return raw.drop(columns="target").to_numpy(dtype=float), raw["target"].to_numpy()


CONCRETE_X, CONCRETE_Y = load("concrete", 300)
CONCRETE_Y = (CONCRETE_Y - CONCRETE_Y.mean()) / CONCRETE_Y.std()
CANCER_X, CANCER_Y = load("breast_cancer", 250)


def with_choice(space, point, choice):
    """`point` with the space's first parameter (the categorical that picks the
    algorithm) one-hot at `choice`."""
    key = space.parameters[0]
    point = np.array(point, dtype=float)
    point[: key.width] = key.encode(choice)
    return point


def branch(space, choice, **categorical):
    """The configuration of `choice` in the middle of every numeric range, with the
    given categorical values."""
    key = space.parameters[0].name
    for config in space.grid(1):
        if config[key] == choice and all(
            config.get(k) == v for k, v in categorical.items()
        ):
            return config
    raise AssertionError(f"no configuration of {choice} with {categorical}")


def final_step(model):
    return model[-1] if isinstance(model, Pipeline) else model


def assert_same_configuration(decoded, config):
    assert set(decoded) == set(config)
    for name, value in config.items():
        if isinstance(value, float):
            assert math.isclose(decoded[name], value, rel_tol=1e-12), name
        else:
            assert decoded[name] == value, name


# --- the spaces ----------------------------------------------------------------


def test_the_new_spaces_fit_their_task():
    assert model_task("segor_sklearn") == "regression"
    assert model_task("hist_gradient_boosting_regressor") == "regression"
    assert model_task("hist_gradient_boosting_classifier") == "classification"
    assert set(SEGOR.parameters[0].choices) == set(SEGOR_FAMILIES)
    assert "hist_gradient_boosting" in SEGO.parameters[0].choices


def test_the_paper_s_sego_space_is_sego_sklearn_without_histogram_boosting():
    paper = MODELS["sego_sklearn_paper"]
    ours = {k: v for k, v in MODELS["sego_sklearn"].items() if k not in HGB_SETTINGS}
    assert paper["classifier"]["choices"] == [
        choice
        for choice in ours.pop("classifier")["choices"]
        if choice != "hist_gradient_boosting"
    ]
    assert {k: v for k, v in paper.items() if k != "classifier"} == ours
    assert model_task("sego_sklearn_paper") == "classification"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=SEGOR.dim, max_size=SEGOR.dim))
def test_segor_sklearn_round_trips_through_its_encoding(unit):
    config = SEGOR.decode(np.array(unit))
    assert_same_configuration(SEGOR.decode(SEGOR.encode(config)), config)
    # the maximizer's candidates: canonical points decode to the same configuration
    assert SEGOR.decode(SEGOR.canonicalize(np.array(unit))[0]) == config


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=SEGO.dim, max_size=SEGO.dim))
def test_sego_sklearn_round_trips_through_its_encoding(unit):
    config = SEGO.decode(np.array(unit))
    assert_same_configuration(SEGO.decode(SEGO.encode(config)), config)


@pytest.mark.parametrize("choice", sorted(SEGOR_FAMILIES))
def test_every_regressor_of_segor_sklearn_is_reached_with_its_own_settings(choice):
    _, _, names = SEGOR_FAMILIES[choice]
    rng = np.random.default_rng(0)
    seen = set()
    for raw in rng.random((30, SEGOR.dim)):
        config = SEGOR.decode(with_choice(SEGOR, raw, choice))
        nested = {
            name
            for name, (parent, value) in NESTED.items()
            if config.get(parent) == value
        }
        assert set(config) == {"regressor"} | names | nested
        assert_same_configuration(SEGOR.decode(SEGOR.encode(config)), config)
        seen |= nested
    # the nested settings are reached too (units_2, the Huber quantile)
    assert seen == {n for n, (parent, _) in NESTED.items() if parent in names}


def test_hist_gradient_boosting_of_sego_sklearn_has_its_own_settings():
    for raw in np.random.default_rng(1).random((10, SEGO.dim)):
        config = SEGO.decode(with_choice(SEGO, raw, "hist_gradient_boosting"))
        assert set(config) == {"classifier"} | HGB_SETTINGS
        assert_same_configuration(SEGO.decode(SEGO.encode(config)), config)


def branch_parameters(space_name, choice):
    """The parameters of one choice of a conditional space, as they would be
    declared alone: no condition on the choice, `<choice>__` taken off the name."""
    specs = MODELS[space_name]
    key = next(iter(specs))
    members = {}
    for name, spec in specs.items():
        condition = spec.get("condition")
        if not condition:
            continue
        ((parent, values),) = condition.items()
        values = values if isinstance(values, list) else [values]
        own = name.removeprefix(f"{choice}__")
        if parent == key and choice in values:
            plain = {k: v for k, v in spec.items() if k != "condition"}
            members[own] = parameter_from_spec(own, plain)
        elif parent in members:  # a condition inside the choice stays
            members[own] = parameter_from_spec(own, spec)
    return members


def standalone_parameters(space_name, leave_out=()):
    return {
        name: parameter_from_spec(name, spec)
        for name, spec in MODELS[space_name].items()
        if name not in leave_out
    }


@pytest.mark.parametrize(
    ("space_name", "choice", "standalone", "leave_out"),
    [
        (
            "segor_sklearn",
            "hist_gradient_boosting",
            "hist_gradient_boosting_regressor",
            (),
        ),
        ("segor_sklearn", "random_forest", "random_forest_regressor", ("method",)),
        ("segor_sklearn", "extra_trees", "random_forest_regressor", ("method",)),
        ("segor_sklearn", "gradient_boosting", "gradient_boosting_regressor", ()),
        ("segor_sklearn", "svr", "svr", ()),
        ("segor_sklearn", "elastic_net", "elastic_net", ()),
        ("segor_sklearn", "mlp", "mlp_regressor", ("max_iter",)),
        ("segor_sklearn", "decision_tree", "decision_tree_regressor", ()),
        (
            "sego_sklearn",
            "hist_gradient_boosting",
            "hist_gradient_boosting_classifier",
            (),
        ),
    ],
)
def test_each_choice_keeps_the_ranges_of_its_own_space(
    space_name, choice, standalone, leave_out
):
    expected = standalone_parameters(standalone, leave_out)
    found = branch_parameters(space_name, choice)
    for name in leave_out:
        found.pop(name, None)
    assert found == expected


def test_the_knn_regressor_keeps_sego_s_range_and_the_mlp_a_cheaper_cap():
    assert branch_parameters("segor_sklearn", "knn") == branch_parameters(
        "sego_sklearn", "knn"
    )
    # 200 epochs (scikit-learn's default) rather than mlp_regressor's 500: see conf
    assert branch_parameters("segor_sklearn", "mlp")["max_iter"].value == 200
    assert MODELS["mlp_regressor"]["max_iter"]["value"] == 500


def test_the_hist_gradient_boosting_spaces_are_one_anchor():
    regressor = MODELS["hist_gradient_boosting_regressor"]
    assert MODELS["hist_gradient_boosting_classifier"] == regressor
    assert regressor["max_iter"] == {"type": "constant", "value": 100}
    assert regressor["early_stopping"] == {"type": "constant", "value": False}


# --- the estimators ------------------------------------------------------------


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("choice", sorted(SEGOR_FAMILIES))
def test_every_regressor_of_segor_sklearn_learns_concrete(choice):
    estimator_class, scaled, _ = SEGOR_FAMILIES[choice]
    X, y = CONCRETE_X, CONCRETE_Y
    configs = [c for c in SEGOR.grid(1) if c["regressor"] == choice]
    for config in configs:  # the middle of the ranges, every categorical value
        model = make_model("segor_sklearn", config, 0)
        assert type(final_step(model)) is estimator_class
        steps = [type(step) for _, step in model.steps] if scaled else []
        if scaled:
            assert steps == [SimpleImputer, StandardScaler, estimator_class]
        predictions = model.fit(X[:200], y[:200]).predict(X[200:])
        assert predictions.shape == (100,) and np.isfinite(predictions).all()
        # better than the mean on held-out rows (the weakest, the tree, ~0.24)
        r2 = 1 - np.mean((predictions - y[200:]) ** 2) / np.var(y[200:])
        assert r2 > 0.1, (config, r2)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_every_classifier_of_sego_sklearn_fits_breast_cancer():
    X, y = CANCER_X, CANCER_Y
    choices = set()
    for config in SEGO.grid(1):
        predictions = make_model("sego_sklearn", config, 0).fit(X[:170], y[:170])
        predictions = predictions.predict(X[170:])
        assert predictions.shape == (80,) and set(np.unique(predictions)) <= {0, 1}
        choices.add(config["classifier"])
        if config["classifier"] == "hist_gradient_boosting":
            assert np.mean(predictions == y[170:]) > 0.9
    assert choices == set(SEGO.parameters[0].choices)


@pytest.mark.parametrize("seed", [0, 1])
def test_hist_gradient_boosting_has_the_configuration_s_settings(seed):
    config = branch(SEGOR, "hist_gradient_boosting")
    model = make_model("segor_sklearn", config, seed)
    assert type(model) is HistGradientBoostingRegressor
    assert model.max_iter == 100 and model.early_stopping is False
    assert model.min_samples_leaf == config["hist_gradient_boosting__min_samples_leaf"]
    assert (model.learning_rate, model.max_leaf_nodes) == (
        config["learning_rate"],
        config["max_leaf_nodes"],
    )
    assert model.random_state == seed
    classifier = make_model(
        "sego_sklearn", branch(SEGO, "hist_gradient_boosting"), seed
    )
    assert type(classifier) is HistGradientBoostingClassifier
    assert classifier.random_state == seed and classifier.max_iter == 100


# --- settings from conf, and the dispatcher's checks ----------------------------


@pytest.mark.parametrize(
    ("name", "choice", "setting"),
    [
        ("segor_sklearn", "hist_gradient_boosting", "hist_gradient_boosting__max_iter"),
        ("segor_sklearn", "hist_gradient_boosting", "early_stopping"),
        ("segor_sklearn", "random_forest", "n_estimators"),
        ("segor_sklearn", "extra_trees", "n_estimators"),
        ("segor_sklearn", "gradient_boosting", "n_estimators"),
        ("segor_sklearn", "mlp", "mlp__max_iter"),
        ("sego_sklearn", "hist_gradient_boosting", "hist_gradient_boosting__max_iter"),
        ("sego_sklearn", "hist_gradient_boosting", "early_stopping"),
        ("hist_gradient_boosting_regressor", None, "max_iter"),
        ("hist_gradient_boosting_classifier", None, "early_stopping"),
    ],
)
def test_a_configuration_without_a_constant_is_refused(name, choice, setting):
    space = SearchSpace.from_dict(MODELS[name])
    config = space.grid(1)[0] if choice is None else branch(space, choice)
    del config[setting]
    own_name = setting.removeprefix(f"{choice}__")
    with pytest.raises(MissingSettingError, match=f"lacks '{own_name}'") as error:
        make_model(name, config, 0)
    if choice is not None:  # the note tells how the conditional space names it
        assert f"{choice}__<name>" in "".join(error.value.__notes__)


def test_the_dispatcher_refuses_settings_of_another_choice_or_given_twice():
    tree = branch(SEGOR, "decision_tree")
    with pytest.raises(ValueError, match="'mlp__max_iter' belongs to regressor='mlp'"):
        make_model("segor_sklearn", {**tree, "mlp__max_iter": 200}, 0)
    with pytest.raises(ValueError, match="'max_depth' is given twice"):
        make_model("segor_sklearn", {**tree, "max_depth": 3}, 0)
    with pytest.raises(ValueError, match="regressor='ridge' is not one of"):
        make_model("segor_sklearn", {"regressor": "ridge", "alpha": 1.0}, 0)
    with pytest.raises(ValueError, match="classifier=None is not one of"):
        make_model("sego_sklearn", {"n_neighbors": 3}, 0)


def test_qualified_settings_reach_the_estimator_under_their_own_name():
    tree = make_model("segor_sklearn", branch(SEGOR, "decision_tree"), 0)
    config = branch(SEGOR, "decision_tree")
    assert tree.max_depth == config["decision_tree__max_depth"]
    assert tree.max_features == config["decision_tree__max_features"]
    huber = branch(SEGOR, "gradient_boosting", loss="huber")
    boosting = make_model("segor_sklearn", huber, 0)[-1]  # after the imputer
    assert (boosting.alpha, boosting.max_depth) == (
        huber["gradient_boosting__alpha"],
        huber["gradient_boosting__max_depth"],
    )
    net = branch(SEGOR, "elastic_net")
    elastic = make_model("segor_sklearn", net, 0)[-1]
    assert (elastic.alpha, elastic.max_iter) == (
        net["elastic_net__alpha"],
        net["elastic_net__max_iter"],
    )


# --- missing values and seeds ---------------------------------------------------


def test_hist_gradient_boosting_takes_missing_values_without_an_imputer():
    assert takes_missing_values(HistGradientBoostingRegressor())
    assert takes_missing_values(HistGradientBoostingClassifier())
    X = CONCRETE_X.copy()
    X[np.random.default_rng(0).random(X.shape) < 0.2] = np.nan
    labels = (CONCRETE_Y > 0).astype(int)
    for name, config, y in [
        ("segor_sklearn", branch(SEGOR, "hist_gradient_boosting"), CONCRETE_Y),
        ("sego_sklearn", branch(SEGO, "hist_gradient_boosting"), labels),
        ("hist_gradient_boosting_regressor", None, CONCRETE_Y),
        ("hist_gradient_boosting_classifier", None, labels),
    ]:
        model = make_model(
            name, config or SearchSpace.from_dict(MODELS[name]).grid(1)[0], 0
        )
        assert not isinstance(model, Pipeline)  # no imputer in front
        predictions = model.fit(X[:200], y[:200]).predict(X[200:])
        assert np.isfinite(predictions).all()
    # while a family that cannot take them imputes first
    knn = make_model("segor_sklearn", branch(SEGOR, "knn"), 0)
    assert isinstance(knn.steps[0][1], SimpleImputer)


# The seeded families, at settings where the seed draws something (bootstrap
# rows, features per split, initial weights): another seed, another model.
# (choice, its categorical values, numeric settings changed from the middle)
RANDOMIZED = [
    ("hist_gradient_boosting", {}, {"max_features": 0.5}),
    ("random_forest", {"bootstrap": True}, {}),
    ("extra_trees", {"bootstrap": False}, {}),
    ("mlp", {"activation": "tanh", "n_hidden_layers": 1}, {}),
    ("decision_tree", {}, {"decision_tree__max_features": 0.5}),
]


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize(
    ("choice", "categorical", "changes"), RANDOMIZED, ids=[c for c, *_ in RANDOMIZED]
)
def test_the_same_seed_gives_the_same_model(choice, categorical, changes):
    config = {**branch(SEGOR, choice, **categorical), **changes}
    X, y = CONCRETE_X[:200], CONCRETE_Y[:200]

    def predictions(seed):
        model = make_model("segor_sklearn", config, seed)
        assert final_step(model).random_state == seed
        return model.fit(X, y).predict(CONCRETE_X[200:])

    first = predictions(7)
    np.testing.assert_array_equal(predictions(7), first)
    assert not np.array_equal(predictions(8), first)


def test_the_seed_fixes_the_hist_gradient_boosting_classifier():
    config = {**branch(SEGO, "hist_gradient_boosting"), "max_features": 0.3}
    X, y = CANCER_X[:170], CANCER_Y[:170]

    def probabilities(seed):
        model = make_model("sego_sklearn", config, seed).fit(X, y)
        return model.predict_proba(CANCER_X[170:])

    first = probabilities(7)
    np.testing.assert_array_equal(probabilities(7), first)
    assert not np.array_equal(probabilities(8), first)


@pytest.mark.parametrize("choice", ["gradient_boosting", "elastic_net"])
def test_the_other_seeded_regressors_take_the_seed(choice):
    # their fits draw nothing at these settings, but get the seed all the same
    categorical = {"loss": "squared_error"} if choice == "gradient_boosting" else {}
    config = branch(SEGOR, choice, **categorical)
    X, y = CONCRETE_X[:200], CONCRETE_Y[:200]
    first = make_model("segor_sklearn", config, 7)
    assert final_step(first).random_state == 7
    again = make_model("segor_sklearn", config, 7).fit(X, y).predict(CONCRETE_X[200:])
    np.testing.assert_array_equal(first.fit(X, y).predict(CONCRETE_X[200:]), again)


# --- CatBoost as one more family ------------------------------------------------

CATBOOST_SPACES = {
    # space: (the space it extends, its algorithm key, CatBoost's estimator,
    # CatBoost's one-family space for the task)
    "segor_sklearn_catboost": (
        "segor_sklearn",
        "regressor",
        "CatBoostRegressor",
        "catboost_regressor",
    ),
    "sego_sklearn_catboost": (
        "sego_sklearn",
        "classifier",
        "CatBoostClassifier",
        "catboost_classifier",
    ),
}


@pytest.mark.parametrize("name", sorted(CATBOOST_SPACES))
def test_a_catboost_space_is_its_base_space_with_catboost_in_catboost_s_ranges(name):
    base, key, _, catboost_space = CATBOOST_SPACES[name]
    extended, original = MODELS[name], MODELS[base]
    assert extended[key]["choices"] == ["catboost", *original[key]["choices"]]
    # the boosting learning rate is shared; every other setting of the base
    # space is the same, and in the same order (the encoding's)
    shared = extended["learning_rate"]["condition"][key]
    assert shared[0] == "catboost" and shared[1:] in (
        original["learning_rate"]["condition"][key],
        [original["learning_rate"]["condition"][key]],
    )
    rest = [p for p in original if p not in (key, "learning_rate")]
    assert [
        p for p in extended if p in original and p not in (key, "learning_rate")
    ] == rest
    assert all(extended[p] == original[p] for p in rest)
    # CatBoost's own settings: those of its one-family space, under the condition
    catboost_only = MODELS[catboost_space]
    own = [p for p in extended if p not in original]
    assert own == [p for p in catboost_only if p != "learning_rate"]
    for parameter in own:
        assert extended[parameter] == catboost_only[parameter] | {
            "condition": {key: "catboost"}
        }
    assert SearchSpace.from_dict(extended).dim > SearchSpace.from_dict(original).dim


@pytest.mark.parametrize("name", sorted(CATBOOST_SPACES))
def test_a_catboost_space_starts_from_its_base_space_s_portfolios(name):
    base = CATBOOST_SPACES[name][0]
    conf = PROJECT / "conf/base"
    for file, key in (
        ("parameters_portfolios.yml", "portfolios"),
        ("parameters_large_data_portfolios.yml", "large_data_portfolios"),
    ):
        portfolios = yaml.safe_load((conf / file).read_text())[key]
        assert portfolios[name] == portfolios[base]
        space = SearchSpace.from_dict(MODELS[name])
        for config in portfolios[name]:  # each a point of the extended space
            assert_same_configuration(space.decode(space.encode(config)), config)


@pytest.mark.parametrize("name", sorted(CATBOOST_SPACES))
@pytest.mark.parametrize("seed", [0, 5])
def test_a_catboost_configuration_of_a_mixed_space_is_that_catboost_model(name, seed):
    pytest.importorskip("catboost")
    _, key, estimator_name, _ = CATBOOST_SPACES[name]
    space = SearchSpace.from_dict(MODELS[name])
    config = branch(space, "catboost")
    assert set(config) == {
        key,
        "learning_rate",
        "depth",
        "l2_leaf_reg",
        "rsm",
        "iterations",
    }
    model = make_model(name, config, seed)
    assert type(final_step(model)).__name__ == estimator_name
    params = model.get_params()
    for setting in ("learning_rate", "depth", "l2_leaf_reg", "rsm", "iterations"):
        assert params[setting] == config[setting], setting
    assert params["random_seed"] == seed
    if key == "regressor":
        X, y = CONCRETE_X, CONCRETE_Y
        predictions = model.fit(X[:200], y[:200]).predict(X[200:])
        r2 = 1 - np.mean((predictions - y[200:]) ** 2) / np.var(y[200:])
        assert r2 > 0.5, r2
    else:
        X, y = CANCER_X, CANCER_Y
        predictions = model.fit(X[:170], y[:170]).predict(X[170:])
        assert np.mean(predictions.ravel() == y[170:]) > 0.9
    assert model_task(name) == (
        "regression" if key == "regressor" else "classification"
    )


# --- Histogram boosting's rounds searched ---------------------------------------


def test_the_rounds_space_is_segor_sklearn_with_boosting_rounds_searched():
    rounds, base = MODELS["segor_sklearn_rounds"], MODELS["segor_sklearn"]
    assert list(rounds) == list(base)
    changed = [p for p in base if rounds[p] != base[p]]
    assert changed == ["hist_gradient_boosting__max_iter"]
    assert base[changed[0]]["type"] == "constant"
    assert rounds[changed[0]] == {
        "type": "int",
        "low": 50,
        "high": 1000,
        "log": True,
        "condition": {"regressor": "hist_gradient_boosting"},
    }
    conf = PROJECT / "conf/base"
    for file, key in (
        ("parameters_portfolios.yml", "portfolios"),
        ("parameters_large_data_portfolios.yml", "large_data_portfolios"),
    ):
        portfolios = yaml.safe_load((conf / file).read_text())[key]
        assert portfolios["segor_sklearn_rounds"] == portfolios["segor_sklearn"]


@pytest.mark.parametrize("rounds", [50, 1000])
def test_a_rounds_configuration_boosts_for_its_rounds(rounds):
    space = SearchSpace.from_dict(MODELS["segor_sklearn_rounds"])
    config = branch(space, "hist_gradient_boosting")
    config["hist_gradient_boosting__max_iter"] = rounds
    model = make_model("segor_sklearn_rounds", config, 0)
    boosting = final_step(model)
    assert isinstance(boosting, HistGradientBoostingRegressor)
    assert boosting.fit(CONCRETE_X, CONCRETE_Y).n_iter_ == rounds
