"""The models the searches tune, by name: an estimator, or a family of them.

Each factory maps a configuration of the model's search space (the
`models` block of conf/base/parameters_models.yml, from the papers' spaces)
to an unfitted scikit-learn estimator. Algorithms that are sensitive to the
scale of their inputs get a StandardScaler in front, fitted inside each fold.

Settings that change results but are not searched (the number of trees, the
MLP's and the SVCs' iteration caps, histogram boosting's iterations and early
stopping) are constants of the spaces in conf, not defaults here: the
factories read them from the configuration and refuse one that lacks them
(`MissingSettingError`).

Every model is a regressor or a classifier (`model_task`); classifiers are
given integer class codes 0..K-1 and predict labels, and their probabilities
where they have `predict_proba` (evaluation.out_of_fold_predictions).

Missing feature values (NaN) are taken by every model: an estimator
whose scikit-learn tags say it accepts them (decision trees, random forests,
extra trees and histogram gradient boosting, which send missing values down
the side that fits best) gets them as they are; every other one gets a median
SimpleImputer in front of it (and of its scaler), fitted inside each fold like
the scaler (`make_model`). On data without missing values the imputer changes
nothing.

LightGBM (`lightgbm_regressor`, `lightgbm_classifier`) and CatBoost
(`catboost_regressor`, `catboost_classifier`) are optional families: their
packages come with the `lightgbm` and `catboost` extras (`pip install
'ensemble_bo[lightgbm,catboost]'`) and are imported when such a model is first
built, so the base install does without them. Both take the category codes as
numbers, and each takes the threads its worker may use (core.threads): their
thread pools are their own, out of reach of the limits set before they load.

Histogram gradient boosting takes the columns of category codes
(core.encoding) as categories, splitting on sets of levels rather than on an
order of codes that means nothing: `make_model` tells it which columns those
are. Every other model takes the codes as numbers.
"""

from __future__ import annotations

import importlib
import importlib.util
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Literal

from sklearn.base import BaseEstimator
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
from sklearn.exceptions import ConvergenceWarning
from sklearn.impute import SimpleImputer
from sklearn.linear_model import ElasticNet
from sklearn.naive_bayes import GaussianNB
from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor
from sklearn.neural_network import MLPClassifier, MLPRegressor
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC, SVR
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor
from sklearn.utils import get_tags

from ensemble_bo.core.threads import model_threads

Factory = Callable[[dict[str, Any], int], BaseEstimator]
Task = Literal["regression", "classification"]


class MissingSettingError(ValueError):
    """A configuration lacks a setting that the factory takes from conf."""


def _require(
    estimator_class: type[BaseEstimator], params: dict[str, Any], *names: str
) -> None:
    """Refuse a configuration without `names`: they have no default in code."""
    missing = [name for name in names if name not in params]
    if missing:
        raise MissingSettingError(
            f"{estimator_class.__name__}: the configuration lacks "
            f"{', '.join(map(repr, missing))} (no default in code); declare it in "
            "the model's space in conf/base/parameters_models.yml, e.g. "
            f"{missing[0]}: {{type: constant, value: ...}} (given: {sorted(params)})"
        )


def _estimator(
    estimator_class: type[BaseEstimator],
    *,
    scaled: bool = False,
    seeded: bool = True,
    required: tuple[str, ...] = (),
    **fixed: Any,
) -> Factory:
    """A factory passing the configuration (and the fixed arguments) straight on.

    `required` names settings the configuration must hold (constants of the
    space in conf), so that the estimator never falls back on its default.
    """

    def factory(params: dict[str, Any], seed: int) -> BaseEstimator:
        _require(estimator_class, params, *required)
        seed_argument = {"random_state": seed} if seeded else {}
        model = estimator_class(**fixed, **seed_argument, **params)
        return make_pipeline(StandardScaler(), model) if scaled else model

    return factory


def _mlp(estimator_class: type[BaseEstimator]) -> Factory:
    def factory(params: dict[str, Any], seed: int) -> BaseEstimator:
        # SEGOR s.4: learning rate, activation and up to two hidden layers.
        _require(estimator_class, params, "max_iter")
        layers = [params["units_1"]] + (
            [params["units_2"]] if params["n_hidden_layers"] == 2 else []
        )
        return make_pipeline(
            StandardScaler(),
            estimator_class(
                hidden_layer_sizes=tuple(layers),
                activation=params["activation"],
                learning_rate_init=params["learning_rate_init"],
                max_iter=params["max_iter"],
                random_state=seed,
            ),
        )

    return factory


def _random_forest(
    breiman: type[BaseEstimator], extra_trees: type[BaseEstimator]
) -> Factory:
    def factory(params: dict[str, Any], seed: int) -> BaseEstimator:
        # ESMBO s.6.1: Breiman's forest or extremely randomized trees, bootstrap
        # or not.
        forest = extra_trees if params["method"] == "extra_trees" else breiman
        _require(forest, params, "n_estimators")
        return forest(
            n_estimators=params["n_estimators"],
            bootstrap=params["bootstrap"],
            max_features=params["max_features"],
            random_state=seed,
        )

    return factory


def _svc(**kernel: Any) -> Factory:
    # The SVC seed only matters with probability=True, which is off (its Platt
    # scaling would cost 5 more fits; an SVC contributes the one-hot of its
    # label), but is given for uniformity. max_iter, the
    # cap on libsvm's iterations, comes from the space (see the conf).
    return _estimator(SVC, scaled=True, required=("max_iter",), **kernel)


_rbf_svc = _svc(kernel="rbf")
_decision_tree_classifier = _estimator(DecisionTreeClassifier)


def _hist_gradient_boosting(estimator_class: type[BaseEstimator]) -> Factory:
    # The boosting iterations and early stopping come from the space (see the
    # conf); the seed draws the features of a split when max_features < 1.
    return _estimator(estimator_class, required=("max_iter", "early_stopping"))


def _needs(package: str) -> str:
    return f"needs {package}: pip install 'ensemble_bo[{package}]' (or pip install {package})"


def _optional(package: str, estimator_name: str) -> type[BaseEstimator]:
    """`package`.`estimator_name`, imported now; a missing package names its extra."""
    try:
        module = importlib.import_module(package)
    except ImportError:
        raise ImportError(f"the model {estimator_name} {_needs(package)}") from None
    return getattr(module, estimator_name)


def _lightgbm(estimator_name: str) -> Factory:
    def factory(params: dict[str, Any], seed: int) -> BaseEstimator:
        estimator_class = _optional("lightgbm", estimator_name)
        _require(estimator_class, params, "n_estimators")
        # verbose -1: no chatter at every fit.
        return estimator_class(
            random_state=seed, verbose=-1, n_jobs=model_threads(), **params
        )

    return factory


def _catboost(estimator_name: str) -> Factory:
    def factory(params: dict[str, Any], seed: int) -> BaseEstimator:
        estimator_class = _optional("catboost", estimator_name)
        _require(estimator_class, params, "iterations")
        # Silent, and no catboost_info/ folder written into the working directory.
        return estimator_class(
            random_seed=seed,
            logging_level="Silent",
            allow_writing_files=False,
            thread_count=model_threads() or -1,
            **params,
        )

    return factory


def _conditional(key: str, factories: Mapping[str, Factory]) -> Factory:
    """The factory of a conditional space whose categorical `key` picks the algorithm.

    The configuration's other settings go to the chosen algorithm's factory.
    One named `<choice>__<name>` (scikit-learn's spelling of a nested
    parameter) is that choice's own `name`: the space's way to give one
    algorithm its own range of a name that another algorithm uses with
    another range (see `segor_sklearn` in the conf).
    """

    def factory(params: dict[str, Any], seed: int) -> BaseEstimator:
        choice = params.get(key)
        if choice not in factories:
            raise ValueError(
                f"{key}={choice!r} is not one of {sorted(factories)} "
                f"(configuration: {params})"
            )
        hyperparameters: dict[str, Any] = {}
        for name, value in params.items():
            if name == key:
                continue
            owner, qualified, own_name = name.partition("__")
            if qualified and owner != choice:
                raise ValueError(
                    f"{key}={choice!r}: the setting {name!r} belongs to {key}={owner!r}"
                )
            if qualified and own_name in params:
                raise ValueError(
                    f"{key}={choice!r}: {own_name!r} is given twice, as {own_name!r} "
                    f"and {name!r}"
                )
            hyperparameters[own_name if qualified else name] = value
        try:
            return factories[choice](hyperparameters, seed)
        except MissingSettingError as error:
            error.add_note(
                f"In this conditional space the setting applies when {key} is "
                f"{choice!r}: give it the condition {{{key}: {choice}}}, named "
                f"{choice}__<name> if another {key} uses the name with another "
                "range."
            )
            raise

    return factory


def qda_reg_param(paper_value: float) -> float:
    """SEGO s.4.2's QDA regularization (log in [1e-3, 1e3]) as scikit-learn's.

    scikit-learn shrinks each class covariance S to (1 - a) S + a I and needs
    a in [0, 1]. The paper's value r is read as the weight of I against S,
    S + r I, normalized to weights summing to one: a = r / (1 + r). This is
    monotone and keeps the whole log range meaningful (1e-3 -> ~0.001,
    1 -> 0.5, 1e3 -> ~0.999), where clipping at 1 would make the upper half
    of the range one flat plateau for the optimizer.
    """
    return paper_value / (1.0 + paper_value)


def _qda(params: dict[str, Any], seed: int) -> BaseEstimator:
    # Shrinking towards the identity assumes features on one scale.
    return make_pipeline(
        StandardScaler(),
        QuadraticDiscriminantAnalysis(reg_param=qda_reg_param(params["reg_param"])),
    )


# SEGO s.4.2: the scikit-learn classifiers of one conditional space. The
# linear SVM is SVC(kernel="linear") (libsvm, one-vs-one, hinge loss), the
# same model as the linear kernel of sego_svm, rather than LinearSVC, whose
# default squared hinge loss and penalized intercept make it another model.
# Histogram gradient boosting is no part of the paper (it came later): it is
# today's strong learner on tables.
SEGO_CLASSIFIERS: dict[str, Factory] = {
    "knn": _estimator(KNeighborsClassifier, scaled=True, seeded=False),
    "rbf_svm": _rbf_svc,
    "linear_svm": _svc(kernel="linear"),
    "decision_tree": _decision_tree_classifier,
    "random_forest": _estimator(RandomForestClassifier),
    "adaboost": _estimator(AdaBoostClassifier),
    "gaussian_nb": _estimator(GaussianNB, seeded=False),
    # LDA's predictions do not change under rescaling of the features.
    "lda": _estimator(LinearDiscriminantAnalysis, seeded=False),
    "qda": _qda,
    "hist_gradient_boosting": _hist_gradient_boosting(HistGradientBoostingClassifier),
}

_decision_tree_regressor = _estimator(DecisionTreeRegressor)
_mlp_regressor = _mlp(MLPRegressor)
_elastic_net = _estimator(ElasticNet, scaled=True)
# ESMBO s.6.1: RBF kernel; C, gamma and the epsilon tube.
_svr = _estimator(SVR, scaled=True, seeded=False, kernel="rbf")
# ESMBO s.6.1 mixes least squares and least absolute deviation; scikit-learn
# has no convex mix, so the loss is a choice among squared, absolute and Huber
# (which is that mix at the quantile alpha).
_gradient_boosting_regressor = _estimator(
    GradientBoostingRegressor, required=("n_estimators",)
)
_hist_gradient_boosting_regressor = _hist_gradient_boosting(
    HistGradientBoostingRegressor
)
_catboost_regressor = _catboost("CatBoostRegressor")

# The regressors of segor_sklearn's one conditional space: those of the
# papers' spaces above, with Breiman's forest and extremely randomized trees
# as two choices (random_forest_regressor's `method`), and histogram gradient
# boosting and kNN.
SEGOR_REGRESSORS: dict[str, Factory] = {
    "hist_gradient_boosting": _hist_gradient_boosting_regressor,
    "random_forest": _estimator(RandomForestRegressor, required=("n_estimators",)),
    "extra_trees": _estimator(ExtraTreesRegressor, required=("n_estimators",)),
    "gradient_boosting": _gradient_boosting_regressor,
    "svr": _svr,
    "knn": _estimator(KNeighborsRegressor, scaled=True, seeded=False),
    "elastic_net": _elastic_net,
    "mlp": _mlp_regressor,
    "decision_tree": _decision_tree_regressor,
}

_REGRESSORS: dict[str, Factory] = {
    "decision_tree_regressor": _decision_tree_regressor,
    "mlp_regressor": _mlp_regressor,
    "elastic_net": _elastic_net,
    "svr": _svr,
    "random_forest_regressor": _random_forest(
        RandomForestRegressor, ExtraTreesRegressor
    ),
    "gradient_boosting_regressor": _gradient_boosting_regressor,
    "hist_gradient_boosting_regressor": _hist_gradient_boosting_regressor,
    "lightgbm_regressor": _lightgbm("LGBMRegressor"),
    "catboost_regressor": _catboost_regressor,
    "segor_sklearn": _conditional("regressor", SEGOR_REGRESSORS),
    # The same regressors, boosting's rounds searched: a wider space.
    "segor_sklearn_rounds": _conditional("regressor", SEGOR_REGRESSORS),
    # segor_sklearn with CatBoost as one more choice (the `catboost` extra).
    "segor_sklearn_catboost": _conditional(
        "regressor", SEGOR_REGRESSORS | {"catboost": _catboost_regressor}
    ),
}

_sego_sklearn = _conditional("classifier", SEGO_CLASSIFIERS)
_catboost_classifier = _catboost("CatBoostClassifier")

_CLASSIFIERS: dict[str, Factory] = {
    "decision_tree_classifier": _decision_tree_classifier,
    "mlp_classifier": _mlp(MLPClassifier),
    # ESMBO s.6.1: RBF kernel; C and gamma.
    "svm": _rbf_svc,
    "random_forest_classifier": _random_forest(
        RandomForestClassifier, ExtraTreesClassifier
    ),
    "gradient_boosting_classifier": _estimator(
        GradientBoostingClassifier, required=("n_estimators",), loss="log_loss"
    ),
    # SEGO s.4.1: the kernel and its parameters (C, gamma, degree, coef0).
    "sego_svm": _svc(),
    "hist_gradient_boosting_classifier": _hist_gradient_boosting(
        HistGradientBoostingClassifier
    ),
    "lightgbm_classifier": _lightgbm("LGBMClassifier"),
    "catboost_classifier": _catboost_classifier,
    "sego_sklearn": _sego_sklearn,
    # The paper's nine (no histogram boosting): the same factory, a narrower space.
    "sego_sklearn_paper": _sego_sklearn,
    # sego_sklearn with CatBoost as one more choice (the `catboost` extra).
    "sego_sklearn_catboost": _conditional(
        "classifier", SEGO_CLASSIFIERS | {"catboost": _catboost_classifier}
    ),
}

MODEL_FACTORIES: dict[str, Factory] = {**_REGRESSORS, **_CLASSIFIERS}

# The models of the optional families, by the package (and extra) they need.
OPTIONAL_PACKAGES = {
    "lightgbm_regressor": "lightgbm",
    "lightgbm_classifier": "lightgbm",
    "catboost_regressor": "catboost",
    "catboost_classifier": "catboost",
    "segor_sklearn_catboost": "catboost",
    "sego_sklearn_catboost": "catboost",
}


def missing_package(model_name: str) -> str | None:
    """What the model `model_name` lacks to be built, as a message; None: nothing."""
    package = OPTIONAL_PACKAGES.get(model_name)
    if package is None or importlib.util.find_spec(package) is not None:
        return None
    return _needs(package)


MODEL_TASKS: dict[str, Task] = {
    **dict.fromkeys(_REGRESSORS, "regression"),
    **dict.fromkeys(_CLASSIFIERS, "classification"),
}

# The setting that counts a model's training iterations, by model: the
# trees of a forest, the stages of boosting, the MLP's epochs. The
# `iterations` resource of a multi-fidelity search fits a configuration with
# fewer of them. Only spaces whose every configuration has one: in the mixed
# spaces (segor_sklearn, sego_sklearn) some families have none (trees, kNN,
# SVMs), and the max_iter of elastic net and the SVMs caps a solver's
# convergence rather than counting what the model learns.
ITERATION_SETTINGS: dict[str, str] = {
    "mlp_regressor": "max_iter",
    "mlp_classifier": "max_iter",
    "random_forest_regressor": "n_estimators",
    "random_forest_classifier": "n_estimators",
    "gradient_boosting_regressor": "n_estimators",
    "gradient_boosting_classifier": "n_estimators",
    "hist_gradient_boosting_regressor": "max_iter",
    "hist_gradient_boosting_classifier": "max_iter",
    "lightgbm_regressor": "n_estimators",
    "lightgbm_classifier": "n_estimators",
    "catboost_regressor": "iterations",
    "catboost_classifier": "iterations",
}


@contextmanager
def quiet_iteration_caps() -> Iterator[None]:
    """Fits inside stop at their iteration caps without ConvergenceWarning.

    A cap (the MLP's epochs, libsvm's iterations, elastic net's max_iter) is
    part of the configuration in its space: a fit that stops at it is that
    configuration, not a failure, and the warning, once per fold of every
    trial and per member of every refit, would flood a quiet run.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        yield


def _unknown(model_name: str) -> ValueError:
    return ValueError(
        f"unknown model {model_name!r}; available: {sorted(MODEL_FACTORIES)}"
    )


def model_task(model_name: str) -> Task:
    """Whether the model `model_name` is a "regression" or a "classification" one."""
    try:
        return MODEL_TASKS[model_name]
    except KeyError:
        raise _unknown(model_name) from None


def final_estimator(model: BaseEstimator) -> BaseEstimator:
    """The estimator a zoo model ends in: `model`, or a pipeline's last step."""
    return model[-1] if isinstance(model, Pipeline) else model


def takes_missing_values(model: BaseEstimator) -> bool:
    """Whether `model` (an estimator or a pipeline ending in one) fits on data with NaN.

    A pipeline is judged by its last step: a scaler passes NaN through, the
    estimator after it decides.
    """
    estimator = final_estimator(model)
    return bool(get_tags(estimator).input_tags.allow_nan)


def with_imputation(model: BaseEstimator) -> BaseEstimator:
    """`model`, with a median SimpleImputer first unless it takes missing values.

    The imputer keeps a column that is all missing in a training fold (as 0),
    so every fold's model sees the same columns.
    """
    if takes_missing_values(model):
        return model
    imputer = SimpleImputer(strategy="median", keep_empty_features=True)
    if isinstance(model, Pipeline):
        return Pipeline([("simpleimputer", imputer), *model.steps])
    return make_pipeline(imputer, model)


def with_native_categories(
    model: BaseEstimator, categorical_features: Sequence[int]
) -> BaseEstimator:
    """`model`, a histogram gradient boosting one told that the feature columns
    `categorical_features` (indices) hold category codes; any other unchanged."""
    estimator = final_estimator(model)
    if categorical_features and isinstance(
        estimator, HistGradientBoostingClassifier | HistGradientBoostingRegressor
    ):
        estimator.set_params(categorical_features=list(categorical_features))
    return model


def make_model(
    model_name: str,
    params: dict[str, Any],
    random_state: int,
    categorical_features: Sequence[int] = (),
) -> BaseEstimator:
    """An unfitted estimator of the model `model_name` with hyperparameters `params`.

    It takes features with missing values, and learners with native
    categories take the columns `categorical_features` (indices of the
    encoded matrix, core.encoding) as categories (see the module's docstring).
    """
    try:
        factory = MODEL_FACTORIES[model_name]
    except KeyError:
        raise _unknown(model_name) from None
    model = factory(params, random_state)
    return with_imputation(with_native_categories(model, categorical_features))
