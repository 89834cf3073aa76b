import copy
from pathlib import Path

import numpy as np
import pytest
import yaml
from omegaconf import OmegaConf
from sklearn.datasets import load_iris
from sklearn.discriminant_analysis import (
    LinearDiscriminantAnalysis,
    QuadraticDiscriminantAnalysis,
)
from sklearn.ensemble import (
    AdaBoostClassifier,
    ExtraTreesClassifier,
    ExtraTreesRegressor,
    GradientBoostingClassifier,
    GradientBoostingRegressor,
    HistGradientBoostingClassifier,
    HistGradientBoostingRegressor,
    RandomForestClassifier,
    RandomForestRegressor,
)
from sklearn.impute import SimpleImputer
from sklearn.naive_bayes import GaussianNB
from sklearn.neighbors import KNeighborsClassifier
from sklearn.neural_network import MLPClassifier, MLPRegressor
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC
from sklearn.tree import DecisionTreeClassifier

from ensemble_bo.core.space import ConstantParameter, NumericParameter, SearchSpace
from ensemble_bo.core.zoo import (
    MODEL_FACTORIES,
    MODEL_TASKS,
    MissingSettingError,
    make_model,
    missing_package,
    model_task,
    qda_reg_param,
    takes_missing_values,
)
from tests.core.test_multi_family_spaces import HGB_SETTINGS


def step_types(model):
    """The classes of a model's steps, in order (one for a bare estimator)."""
    steps = model.steps if isinstance(model, Pipeline) else [(None, model)]
    return [type(step) for _, step in steps]


def test_mlp_layers_follow_the_conditional_configuration():
    common = {
        "learning_rate_init": 1e-3,
        "activation": "tanh",
        "units_1": 7,
        "max_iter": 500,
    }
    one = make_model("mlp_regressor", {**common, "n_hidden_layers": 1}, 0)
    two = make_model("mlp_regressor", {**common, "n_hidden_layers": 2, "units_2": 3}, 0)
    assert step_types(one) == [SimpleImputer, StandardScaler, MLPRegressor]
    assert one[-1].hidden_layer_sizes == (7,) and two[-1].hidden_layer_sizes == (7, 3)
    assert two[-1].activation == "tanh" and two[-1].random_state == 0


def test_forest_method_picks_breiman_or_extremely_randomized_trees():
    params = {"bootstrap": False, "max_features": 0.3, "n_estimators": 100}
    breiman = make_model("random_forest_regressor", {**params, "method": "breiman"}, 1)
    extra = make_model(
        "random_forest_regressor", {**params, "method": "extra_trees"}, 1
    )
    assert type(breiman) is RandomForestRegressor and type(extra) is ExtraTreesRegressor
    assert (
        extra.n_estimators == 100
        and extra.bootstrap is False
        and extra.max_features == 0.3
    )


def test_gradient_boosting_takes_the_huber_quantile():
    model = make_model(
        "gradient_boosting_regressor",
        {
            "max_depth": 3,
            "learning_rate": 0.1,
            "loss": "huber",
            "alpha": 0.8,
            "n_estimators": 100,
        },
        2,
    )
    assert step_types(model) == [SimpleImputer, GradientBoostingRegressor]
    model = model[-1]
    assert (model.loss, model.alpha, model.n_estimators) == ("huber", 0.8, 100)


def test_scale_sensitive_models_are_scaled():
    for name, params in [
        ("svr", {"C": 1.0, "gamma": 0.1, "epsilon": 0.1}),
        ("elastic_net", {"alpha": 0.1, "l1_ratio": 0.5, "max_iter": 1000}),
    ]:
        # missing values are imputed first, then the scaler, then the estimator
        assert step_types(make_model(name, params, 0))[:2] == [
            SimpleImputer,
            StandardScaler,
        ]


# --- classification --------------------------------------------------------

MODELS = yaml.safe_load(
    (
        Path(__file__).resolve().parents[2] / "conf/base/parameters_models.yml"
    ).read_text()
)["models"]
CLASSIFICATION = sorted(name for name in MODELS if model_task(name) == "classification")
IRIS_X, IRIS_Y = load_iris(return_X_y=True)
SEGO_CLASSES = {
    "knn": KNeighborsClassifier,
    "rbf_svm": SVC,
    "linear_svm": SVC,
    "decision_tree": DecisionTreeClassifier,
    "random_forest": RandomForestClassifier,
    "adaboost": AdaBoostClassifier,
    "gaussian_nb": GaussianNB,
    "lda": LinearDiscriminantAnalysis,
    "qda": QuadraticDiscriminantAnalysis,
    "hist_gradient_boosting": HistGradientBoostingClassifier,
}
SEGO_PARAMETERS = {
    "knn": {"n_neighbors"},
    "rbf_svm": {"C", "gamma", "max_iter"},
    "linear_svm": {"C", "max_iter"},
    "decision_tree": {"max_depth", "min_samples_split", "min_samples_leaf"},
    "random_forest": {
        "n_estimators",
        "max_depth",
        "min_samples_split",
        "min_samples_leaf",
    },
    "adaboost": {"n_estimators"},
    "gaussian_nb": set(),
    "lda": set(),
    "qda": {"reg_param"},
    "hist_gradient_boosting": HGB_SETTINGS,
}


def final_step(model):
    return model[-1] if isinstance(model, Pipeline) else model


def fits_and_predicts_labels(model):
    # raveled: CatBoost's classifiers give their labels as a column (n, 1)
    predictions = np.ravel(model.fit(IRIS_X, IRIS_Y).predict(IRIS_X))
    assert predictions.shape == IRIS_Y.shape
    assert set(np.unique(predictions)) <= {0, 1, 2}


def set_classifier(space, point, choice):
    """`point` with the one-hot of a conditional space's first parameter (the
    `classifier` of sego_sklearn, the `regressor` of segor_sklearn) set to `choice`."""
    key = space.parameters[0]
    assert key.name in {"classifier", "regressor"}
    point = point.copy()
    point[: key.width] = key.encode(choice)
    return point


def estimator_name(setting):
    """The estimator's name of a conditional space's setting: `<choice>__<name>`
    is the choice's own `name`."""
    return setting.partition("__")[2] or setting


def test_the_conf_spaces_and_the_factories_name_the_same_models():
    assert set(MODELS) == set(MODEL_FACTORIES) == set(MODEL_TASKS)
    assert set(CLASSIFICATION) == {
        "decision_tree_classifier",
        "svm",
        "random_forest_classifier",
        "gradient_boosting_classifier",
        "mlp_classifier",
        "hist_gradient_boosting_classifier",
        "lightgbm_classifier",
        "catboost_classifier",
        "sego_svm",
        "sego_sklearn",
        "sego_sklearn_paper",
        "sego_sklearn_catboost",
    }


def test_model_task_names_each_entry_and_refuses_unknown_ones():
    regression = {
        "decision_tree_regressor",
        "mlp_regressor",
        "elastic_net",
        "svr",
        "random_forest_regressor",
        "gradient_boosting_regressor",
        "hist_gradient_boosting_regressor",
        "lightgbm_regressor",
        "catboost_regressor",
        "segor_sklearn",
        "segor_sklearn_catboost",
        "segor_sklearn_rounds",
    }
    for name in MODEL_FACTORIES:
        expected = "regression" if name in regression else "classification"
        assert model_task(name) == expected
    with pytest.raises(ValueError, match="unknown model 'xgboost'"):
        model_task("xgboost")


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("name", CLASSIFICATION)
def test_sampled_configurations_of_each_classification_space_fit_and_predict(name):
    space = SearchSpace.from_dict(MODELS[name])
    rng = np.random.default_rng(0)
    for point in rng.random((3, space.dim)):
        config = space.decode(point)
        fits_and_predicts_labels(make_model(name, config, 0))


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("choice", sorted(SEGO_CLASSES))
def test_each_sego_sklearn_classifier_is_reachable_with_its_own_parameters(choice):
    space = SearchSpace.from_dict(MODELS["sego_sklearn"])
    point = set_classifier(space, np.random.default_rng(1).random(space.dim), choice)
    config = space.decode(point)
    assert config["classifier"] == choice
    assert set(config) == {"classifier"} | SEGO_PARAMETERS[choice]
    model = make_model("sego_sklearn", config, 3)
    estimator = final_step(model)
    assert type(estimator) is SEGO_CLASSES[choice]
    # scale-sensitive classifiers are scaled inside the pipeline; the trees take
    # missing values as they are, every other classifier imputes them first
    scaled = choice in {"knn", "rbf_svm", "linear_svm", "qda"}
    native_nan = choice in {"decision_tree", "random_forest", "hist_gradient_boosting"}
    expected = [
        *([] if native_nan else [SimpleImputer]),
        *([StandardScaler] if scaled else []),
        SEGO_CLASSES[choice],
    ]
    assert step_types(model) == expected
    if "random_state" in estimator.get_params():
        assert estimator.random_state == 3
    fits_and_predicts_labels(model)


@pytest.mark.parametrize("name", ["sego_svm", "sego_sklearn", "segor_sklearn"])
def test_inactive_parameters_are_not_passed_to_the_estimator(name):
    space = SearchSpace.from_dict(MODELS[name])
    # set by the factories (the MLP's layers from its units_1, units_2)
    fixed = {"random_state", "kernel", "hidden_layer_sizes"}
    for point in np.random.default_rng(2).random((40, space.dim)):
        config = space.decode(point)
        estimator = final_step(make_model(name, config, 0))
        defaults = type(estimator)().get_params()
        changed = {
            key
            for key, value in estimator.get_params().items()
            if value != defaults[key]
        }
        given = {estimator_name(setting) for setting in config}
        assert changed <= (given | fixed) - {"classifier", "regressor"}


def test_sego_svm_kernels_take_the_parameters_of_the_paper():
    space = SearchSpace.from_dict(MODELS["sego_svm"])
    kernel = space.parameters[0]
    expected = {
        "linear": {"kernel", "C", "max_iter"},
        "rbf": {"kernel", "C", "gamma", "max_iter"},
        "poly": {"kernel", "C", "degree", "coef0", "max_iter"},
        "sigmoid": {"kernel", "C", "gamma", "coef0", "max_iter"},
    }
    for choice, names in expected.items():
        point = np.random.default_rng(3).random(space.dim)
        point[: kernel.width] = kernel.encode(choice)
        config = space.decode(point)
        assert set(config) == names
        svc = make_model("sego_svm", config, 0)[-1]
        assert svc.kernel == choice and svc.max_iter == 1_000_000
        assert svc.get_params()["C"] == config["C"]


def test_qda_reg_param_maps_the_papers_range_into_the_unit_interval():
    assert qda_reg_param(1e-3) == pytest.approx(1e-3 / 1.001)
    assert qda_reg_param(1.0) == 0.5
    assert qda_reg_param(1e3) == pytest.approx(1e3 / 1001)
    assert 0 < qda_reg_param(1e-3) < qda_reg_param(1e3) < 1
    for paper_value in (1e-3, 1e3):
        model = make_model(
            "sego_sklearn", {"classifier": "qda", "reg_param": paper_value}, 0
        )
        assert model[-1].reg_param == qda_reg_param(paper_value)
        fits_and_predicts_labels(model)


def test_esmbo_classifiers_share_the_regression_spaces_and_factories():
    for regressor, classifier in [
        ("decision_tree_regressor", "decision_tree_classifier"),
        ("random_forest_regressor", "random_forest_classifier"),
        ("mlp_regressor", "mlp_classifier"),
    ]:
        assert MODELS[regressor] == MODELS[classifier]
    forest = {"bootstrap": True, "max_features": 0.5, "n_estimators": 100}
    breiman = make_model("random_forest_classifier", {**forest, "method": "breiman"}, 4)
    extra = make_model(
        "random_forest_classifier", {**forest, "method": "extra_trees"}, 4
    )
    assert type(breiman) is RandomForestClassifier
    assert type(extra) is ExtraTreesClassifier and extra.n_estimators == 100
    mlp = make_model(
        "mlp_classifier",
        {
            "learning_rate_init": 1e-3,
            "activation": "relu",
            "n_hidden_layers": 2,
            "units_1": 5,
            "units_2": 4,
            "max_iter": 500,
        },
        4,
    )
    assert type(mlp[-1]) is MLPClassifier and mlp[-1].hidden_layer_sizes == (5, 4)
    boosting = make_model(
        "gradient_boosting_classifier",
        {
            "max_depth": 2,
            "learning_rate": 0.1,
            "max_features": 0.5,
            "n_estimators": 100,
        },
        4,
    )
    assert step_types(boosting) == [SimpleImputer, GradientBoostingClassifier]
    boosting = boosting[-1]
    assert (boosting.loss, boosting.n_estimators, boosting.random_state) == (
        "log_loss",
        100,
        4,
    )
    svm = make_model("svm", {"C": 1.0, "gamma": 0.1, "max_iter": 1_000_000}, 4)
    assert step_types(svm) == [SimpleImputer, StandardScaler, SVC]
    assert (svm[-1].kernel, svm[-1].max_iter) == ("rbf", 1_000_000)


# --- settings fixed in conf (constants of the spaces) ----------------------

# (model, choice of a conditional space or None, setting, estimator class,
# value in conf). The values of the papers' spaces are those the factories had in
# code before they moved to conf: results for a configuration stay what they were.
CONF_SETTINGS = [
    ("random_forest_regressor", None, "n_estimators", RandomForestRegressor, 100),
    ("random_forest_classifier", None, "n_estimators", RandomForestClassifier, 100),
    (
        "gradient_boosting_regressor",
        None,
        "n_estimators",
        GradientBoostingRegressor,
        100,
    ),
    (
        "gradient_boosting_classifier",
        None,
        "n_estimators",
        GradientBoostingClassifier,
        100,
    ),
    ("mlp_regressor", None, "max_iter", MLPRegressor, 500),
    ("mlp_classifier", None, "max_iter", MLPClassifier, 500),
    ("svm", None, "max_iter", SVC, 1_000_000),
    ("sego_svm", None, "max_iter", SVC, 1_000_000),
    ("sego_sklearn", "rbf_svm", "max_iter", SVC, 1_000_000),
    ("sego_sklearn", "linear_svm", "max_iter", SVC, 1_000_000),
    (
        "hist_gradient_boosting_regressor",
        None,
        "max_iter",
        HistGradientBoostingRegressor,
        100,
    ),
    (
        "hist_gradient_boosting_regressor",
        None,
        "early_stopping",
        HistGradientBoostingRegressor,
        False,
    ),
    (
        "hist_gradient_boosting_classifier",
        None,
        "max_iter",
        HistGradientBoostingClassifier,
        100,
    ),
    (
        "hist_gradient_boosting_classifier",
        None,
        "early_stopping",
        HistGradientBoostingClassifier,
        False,
    ),
    (
        "sego_sklearn",
        "hist_gradient_boosting",
        "hist_gradient_boosting__max_iter",
        HistGradientBoostingClassifier,
        100,
    ),
    (
        "sego_sklearn",
        "hist_gradient_boosting",
        "early_stopping",
        HistGradientBoostingClassifier,
        False,
    ),
    (
        "segor_sklearn",
        "hist_gradient_boosting",
        "hist_gradient_boosting__max_iter",
        HistGradientBoostingRegressor,
        100,
    ),
    (
        "segor_sklearn",
        "hist_gradient_boosting",
        "early_stopping",
        HistGradientBoostingRegressor,
        False,
    ),
    ("segor_sklearn", "random_forest", "n_estimators", RandomForestRegressor, 100),
    ("segor_sklearn", "extra_trees", "n_estimators", ExtraTreesRegressor, 100),
    (
        "segor_sklearn",
        "gradient_boosting",
        "n_estimators",
        GradientBoostingRegressor,
        100,
    ),
    ("segor_sklearn", "mlp", "mlp__max_iter", MLPRegressor, 200),
]
CONF_SETTING_IDS = [
    f"{name}-{choice or setting}" for name, choice, setting, *_ in CONF_SETTINGS
]


def estimators_of(specs, name, choice, seed=0):
    """Estimators built from configurations decoded at random points of `specs`."""
    space = SearchSpace.from_dict(specs)
    for raw in np.random.default_rng(seed).random((5, space.dim)):
        point = raw if choice is None else set_classifier(space, raw, choice)
        config = space.decode(point)
        yield config, final_step(make_model(name, config, 0))


def test_kedro_reads_the_same_spaces_as_plain_yaml():
    # Kedro's loader is OmegaConf; the anchors shared by the regression and
    # classification spaces are plain YAML and resolve alike. (PyYAML reads
    # 1.0e3 as a string, which the space turns into the same float.)
    path = Path(__file__).resolve().parents[2] / "conf/base/parameters_models.yml"
    kedro_models = OmegaConf.to_container(OmegaConf.load(path))["models"]
    assert set(kedro_models) == set(MODELS)
    for name, specs in MODELS.items():
        assert (
            SearchSpace.from_dict(kedro_models[name]).parameters
            == SearchSpace.from_dict(specs).parameters
        )


@pytest.mark.parametrize(
    ("name", "choice", "setting", "estimator_class", "value"),
    CONF_SETTINGS,
    ids=CONF_SETTING_IDS,
)
def test_settings_fixed_in_conf_reach_the_estimator(
    name, choice, setting, estimator_class, value
):
    space = SearchSpace.from_dict(MODELS[name])
    constant = next(p for p in space.parameters if p.name == setting)
    assert isinstance(constant, ConstantParameter) and constant.value == value
    for config, estimator in estimators_of(MODELS[name], name, choice):
        assert config[setting] == value  # recorded with the trial
        assert type(estimator) in {
            estimator_class,
            ExtraTreesRegressor,
            ExtraTreesClassifier,
        }
        assert estimator.get_params()[estimator_name(setting)] == value


@pytest.mark.parametrize(
    ("name", "choice", "setting", "estimator_class", "value"),
    CONF_SETTINGS,
    ids=CONF_SETTING_IDS,
)
def test_a_changed_conf_value_reaches_the_estimator(
    name, choice, setting, estimator_class, value
):
    specs = copy.deepcopy(MODELS[name])
    specs[setting]["value"] = 7
    # the setting is no dimension: changing it leaves the GP's space alone
    assert SearchSpace.from_dict(specs).dim == SearchSpace.from_dict(MODELS[name]).dim
    for config, estimator in estimators_of(specs, name, choice):
        assert config[setting] == 7
        assert estimator.get_params()[estimator_name(setting)] == 7


@pytest.mark.parametrize(
    ("name", "choice", "setting", "estimator_class", "value"),
    CONF_SETTINGS,
    ids=CONF_SETTING_IDS,
)
def test_a_configuration_without_the_setting_is_refused(
    name, choice, setting, estimator_class, value
):
    config, _ = next(estimators_of(MODELS[name], name, choice))
    del config[setting]
    with pytest.raises(MissingSettingError, match=f"lacks '{estimator_name(setting)}'"):
        make_model(name, config, 0)


def test_sego_sklearn_still_searches_the_number_of_trees():
    # its forest and AdaBoost search n_estimators; only the SVMs' cap is fixed
    space = SearchSpace.from_dict(MODELS["sego_sklearn"])
    n_estimators = next(p for p in space.parameters if p.name == "n_estimators")
    assert isinstance(n_estimators, NumericParameter)
    assert (n_estimators.low, n_estimators.high) == (1, 30)
    for choice in ("random_forest", "adaboost"):
        for config, estimator in estimators_of(
            MODELS["sego_sklearn"], "sego_sklearn", choice
        ):
            assert "max_iter" not in config
            assert estimator.n_estimators == config["n_estimators"]


def test_constants_add_no_dimension_to_the_conf_spaces():
    for name, specs in MODELS.items():
        searched = {k: v for k, v in specs.items() if v["type"] != "constant"}
        assert SearchSpace.from_dict(specs).dim == SearchSpace.from_dict(searched).dim


# --- missing feature values ----------------------------------------------------


def missing_value_data(name, rows=90, seed=5):
    """Features (rows, 4) with ~15% NaN (none in a whole column) and a target of
    the space's task (three classes for classification)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(rows, 4))
    y = X[:, 0] - 2 * X[:, 1] + 0.1 * rng.normal(size=rows)
    if model_task(name) == "classification":
        y = np.digitize(y, np.quantile(y, [1 / 3, 2 / 3]))
    X[rng.random(X.shape) < 0.15] = np.nan
    return X, y


def branch_configurations(name, random_points=1):
    """The midpoint of every branch of a space's categoricals, and random points."""
    space = SearchSpace.from_dict(MODELS[name])
    points = np.random.default_rng(0).random((random_points, space.dim))
    return space.grid(1) + [space.decode(point) for point in points]


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_model_space_fits_and_predicts_with_missing_feature_values(name):
    X, y = missing_value_data(name)
    for config in branch_configurations(name):
        model = make_model(name, config, 0)
        # raveled: CatBoost's classifiers give their labels as a column (n, 1)
        predictions = np.ravel(model.fit(X[:60], y[:60]).predict(X[60:]))
        assert predictions.shape == (30,) and np.isfinite(predictions).all(), config
        # an estimator that cannot take NaN imputes them first (median), inside
        # the model, so each fold and the final refit learn their own medians
        if not takes_missing_values(final_step(model)):
            first = model.steps[0][1]
            assert isinstance(first, SimpleImputer) and first.strategy == "median"


@pytest.mark.parametrize(
    ("name", "config"),
    [
        ("svr", {"C": 1.0, "gamma": 0.1, "epsilon": 0.1}),
        (
            "gradient_boosting_regressor",
            {
                "max_depth": 2,
                "learning_rate": 0.1,
                "loss": "squared_error",
                "n_estimators": 20,
            },
        ),
    ],
)
def test_the_imputer_changes_nothing_on_complete_data(name, config):
    X, y = missing_value_data(name)
    X = np.nan_to_num(X)
    imputed = make_model(name, config, 0).fit(X, y).predict(X)
    bare = MODEL_FACTORIES[name](config, 0).fit(X, y).predict(X)
    np.testing.assert_array_equal(imputed, bare)


OPTIONAL_FAMILIES = {
    # model: (its seed's and its threads' parameters, its iterations)
    "lightgbm_regressor": ("random_state", "n_jobs", "n_estimators"),
    "lightgbm_classifier": ("random_state", "n_jobs", "n_estimators"),
    "catboost_regressor": ("random_seed", "thread_count", "iterations"),
    "catboost_classifier": ("random_seed", "thread_count", "iterations"),
}


@pytest.mark.parametrize("name", sorted(OPTIONAL_FAMILIES))
def test_optional_boosting_members_are_seeded_threaded_and_round_trip_skops(name):
    import skops.io  # noqa: PLC0415

    from ensemble_bo.core.threads import limit_threads  # noqa: PLC0415

    seed_name, threads_name, iterations = OPTIONAL_FAMILIES[name]
    space = SearchSpace.from_dict(MODELS[name])
    config = space.decode(np.full(space.dim, 0.5))
    assert config[iterations] == 100  # as every boosting space here
    # in a trial worker limited to one thread, the model takes one thread
    limit_threads(1)
    try:
        model = make_model(name, config, 7)
    finally:
        limit_threads(None)
    # both take missing values themselves: no imputer in front
    assert type(model).__module__.split(".")[0] in {"lightgbm", "catboost"}
    params = model.get_params()
    assert params[seed_name] == 7 and params[threads_name] == 1
    X, y = load_iris(return_X_y=True)
    X[::7, 1] = np.nan
    target = y if name.endswith("classifier") else X[:, 0]
    model.fit(X, target)
    dumped = skops.io.dumps(model)
    loaded = skops.io.loads(dumped, trusted=skops.io.get_untrusted_types(data=dumped))
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))


@pytest.mark.parametrize(
    ("name", "package"),
    [("lightgbm_regressor", "lightgbm"), ("catboost_classifier", "catboost")],
)
def test_an_optional_model_without_its_package_names_the_extra(
    monkeypatch, name, package
):
    import sys  # noqa: PLC0415

    monkeypatch.setitem(sys.modules, package, None)  # its import fails
    with pytest.raises(ImportError, match=rf"pip install 'ensemble_bo\[{package}\]'"):
        make_model(name, {"n_estimators": 100, "iterations": 100}, 0)


@pytest.mark.parametrize(
    "name", ["catboost_regressor", "segor_sklearn_catboost", "sego_sklearn_catboost"]
)
def test_a_space_with_a_catboost_family_needs_the_catboost_extra(monkeypatch, name):
    monkeypatch.setattr(
        "importlib.util.find_spec", lambda package, *args: None
    )  # nothing is installed
    assert missing_package(name) == (
        "needs catboost: pip install 'ensemble_bo[catboost]' (or pip install catboost)"
    )
    assert missing_package("segor_sklearn") is None  # the default needs no extra


def test_without_the_extras_every_other_model_searches_and_theirs_are_refused(
    monkeypatch,
):
    import sys  # noqa: PLC0415

    import pandas as pd  # noqa: PLC0415

    from ensemble_bo import EnsembleRegressor  # noqa: PLC0415
    from ensemble_bo.core.validation import InvalidInput  # noqa: PLC0415

    for package in ("lightgbm", "catboost"):
        monkeypatch.setitem(sys.modules, package, None)  # neither is importable
    monkeypatch.setattr(
        "importlib.util.find_spec",
        lambda name, *args: None if name in {"lightgbm", "catboost"} else True,
    )
    X = pd.DataFrame({"x": np.arange(30.0)})
    y = np.sin(np.arange(30.0))
    search = EnsembleRegressor(model="decision_tree_regressor", budget=3, cv=3)
    assert len(search.fit(X, y).result_.pool) == 3
    with pytest.raises(
        InvalidInput,
        match=r"segor.model='catboost_regressor' needs catboost: "
        r"pip install 'ensemble_bo\[catboost\]'",
    ):
        EnsembleRegressor(model="catboost_regressor", budget=3, cv=3).fit(X, y)
