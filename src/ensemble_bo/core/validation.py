"""Checks of a run's parameters, made before anything is trained.

Every check raises `InvalidInput` (a ValueError) whose message names the bad
value, the parameter's path as in conf/base (`budget`, `ensemble.variant`,
`models.svr.C` in conf/base/parameters_models.yml) and what to do. They are
cheap (no model is fitted), so every caller can make them first:
`check_settings` for a method's parameter blocks (what `run_method` reads),
`check_seed`, `check_data_processing` for the data preparation's options.
The dataset itself is checked by `preparation.validate_dataset`.

Pure: no Kedro, no MLflow, no files.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from numbers import Integral
from typing import TYPE_CHECKING, Any

from ensemble_bo.core.bagging import FINAL_MODELS
from ensemble_bo.core.estimator import VOTING
from ensemble_bo.core.evaluation import check_row_limit
from ensemble_bo.core.inference_budget import InferenceBudget
from ensemble_bo.core.optimizer_kinds import make_optimizer
from ensemble_bo.core.portfolio import check_portfolios
from ensemble_bo.core.preparation import TASKS, check_split_options
from ensemble_bo.core.search import check_max_initial_failures
from ensemble_bo.core.settings import (
    FidelitySettings,
    InvalidInput,
    MethodSettings,
    ParallelSettings,
    RevalidationSettings,
    check_count,
    did_you_mean,
)
from ensemble_bo.core.space import SearchSpace, parameter_from_spec
from ensemble_bo.core.time_budget import (
    check_time_budget,
    check_trial_share,
    is_seconds,
)
from ensemble_bo.core.zoo import (
    ITERATION_SETTINGS,
    MODEL_FACTORIES,
    make_model,
    missing_package,
    model_task,
)

if TYPE_CHECKING:
    from ensemble_bo.core.methods import Method

# Where the models are declared, for messages.
MODELS_FILE = "conf/base/parameters_models.yml"


def check_budget(budget: Any, fractional: bool = False) -> float:
    """The number of configurations a search trains: an int >= 1; with a
    fidelity schedule (`fractional`) any number > 0 of full-fidelity
    equivalents, which a rung's folds or rows can split."""
    if not fractional:
        return check_count(
            budget, "budget", 1, "the number of configurations trained", example=50
        )
    if not is_seconds(budget):  # a positive finite number, as seconds are
        raise InvalidInput(
            f"budget={budget!r} is not a number > 0 (the full-fidelity equivalents "
            "a multi-fidelity search spends); give e.g. --params budget=50"
        )
    return float(budget)


def check_seed(seed: Any) -> int:
    """The run's seed: an int >= 0 (every random choice derives from it)."""
    return check_count(seed, "seed", 0, "every random choice derives from it", 0)


def check_data_processing(options: Any) -> None:
    """The `data_processing` block: target, task, test_size, n_folds."""
    if not isinstance(options, Mapping):
        raise InvalidInput(
            f"data_processing must be a mapping (target, task, test_size, n_folds), "
            f"got {options!r}"
        )
    known = ("target", "task", "test_size", "n_folds")
    unknown = sorted(str(key) for key in options if key not in known)
    if unknown:
        raise InvalidInput(
            f"data_processing has no parameter {' or '.join(map(repr, unknown))}"
            f"{did_you_mean(unknown, known)}; "
            f"its parameters are {list(known)} "
            "(conf/base/parameters_data_processing.yml)"
        )
    missing = [key for key in known if key not in options]
    if missing:
        raise InvalidInput(
            f"data_processing lacks {missing}; see conf/base/parameters_data_processing.yml"
        )
    target = options["target"]
    if not isinstance(target, str) or not target:
        raise InvalidInput(
            f"data_processing.target={target!r} is not a column name; give the name "
            "of the column to predict"
        )
    try:
        check_split_options(options["task"], options["test_size"], options["n_folds"])
    except ValueError as error:
        raise InvalidInput(str(error)) from None


def check_voting(voting: Any) -> None:
    """The classification ensemble's combiner: auto, hard or soft."""
    if voting != "auto" and voting not in VOTING:
        raise InvalidInput(
            f"voting={voting!r} is not one of {['auto', *VOTING]} (auto: the one "
            "matching the objective; hard: weighted majority vote; soft: mean of "
            "the members' probabilities)"
        )


def check_final_model(final_model: Any) -> None:
    """What the final model's members are: refit or bagged."""
    if final_model not in FINAL_MODELS:
        raise InvalidInput(
            f"final_model={final_model!r} is not one of {list(FINAL_MODELS)} "
            "(refit: each member refit on all training rows; bagged: each member "
            "the mean of its cross-validation fold models)"
        )


def check_stacking(stacking: Any) -> None:
    """Whether the final ensemble may be stacked: true or false."""
    if not isinstance(stacking, bool):
        raise InvalidInput(
            f"stacking={stacking!r} is not true or false (true: a level-2 model "
            "on the members' out-of-fold predictions combines them where "
            "cross-validation says it beats their weighted mean)"
        )


def check_conformal_rows(value: Any) -> None:
    """`conformal_rows`: null (the conformal fold models fit on all their
    rows), or an integer >= 100; InvalidInput naming a bad value."""
    _check_rows(value, "conformal_rows")


def check_split_conformal_above(value: Any) -> None:
    """`split_conformal_above`: null (CV+ at any size), or an integer >= 100
    of training rows above which intervals and sets are split conformal;
    InvalidInput naming a bad value."""
    _check_rows(value, "split_conformal_above")


def _check_rows(value: Any, name: str) -> None:
    try:
        check_row_limit(value, name)
    except ValueError as error:
        raise InvalidInput(str(error)) from None


def check_conformal(conformal: Any) -> None:
    """Whether the final model gives conformal intervals or sets: true or false."""
    if not isinstance(conformal, bool):
        raise InvalidInput(
            f"conformal={conformal!r} is not true or false (true: the final model "
            "also fits on each fold's complement and gives prediction intervals "
            "or sets, CV+)"
        )


# --- models ------------------------------------------------------------------


def _space_error(space: str, where: str, error: Exception) -> InvalidInput:
    return InvalidInput(
        f"{where} in {MODELS_FILE} (model {space!r}): {error}; fix it there, or "
        "in the `models` you override"
    )


def check_model_space(name: str, specs: Any) -> SearchSpace:
    """One model of `models`: every parameter's spec, the space as a whole,
    and (for a space the zoo knows) one configuration of each branch builds its
    estimator, so a misspelt hyperparameter is caught before any training."""
    if not isinstance(specs, Mapping) or not specs:
        raise _space_error(
            name, f"models.{name}", ValueError("a space is a mapping of parameters")
        )
    for parameter, spec in specs.items():
        try:
            parameter_from_spec(str(parameter), spec)
        except ValueError as error:
            raise _space_error(name, f"models.{name}.{parameter}", error) from None
    try:
        space = SearchSpace.from_dict(specs)
    except ValueError as error:
        raise _space_error(name, f"models.{name}", error) from None
    # An optional family without its package is checked where a search uses it.
    if name in MODEL_FACTORIES and missing_package(name) is None:
        for config in space.grid(1):  # the midpoint of every categorical branch
            try:
                make_model(name, config, 0)
            except (TypeError, ValueError) as error:
                raise _space_error(
                    name,
                    f"models.{name}",
                    ValueError(
                        f"the configuration {config} does not build the estimator "
                        f"({type(error).__name__}: {error}); the space's parameter "
                        "names must be the estimator's"
                    ),
                ) from None
    return space


def check_model_spaces(models: Any) -> dict[str, SearchSpace]:
    """Every model of `models` (all of them, used by this run or not)."""
    if not isinstance(models, Mapping) or not models:
        raise InvalidInput(
            f"models must map model names to search spaces ({MODELS_FILE}), "
            f"got {models!r}"
        )
    return {name: check_model_space(str(name), specs) for name, specs in models.items()}


def check_default_models(default_models: Any, models: Mapping[str, Any]) -> None:
    """`default_models`: for each task, a model of `models` for that task."""
    if not isinstance(default_models, Mapping):
        raise InvalidInput(
            f"default_models must map a task to a model ({MODELS_FILE}), got "
            f"{default_models!r}"
        )
    for task, model in default_models.items():
        if task not in TASKS:
            raise InvalidInput(
                f"default_models.{task}: unknown task {task!r}; expected {list(TASKS)}"
            )
        _check_model_name(f"default_models.{task}", model, models, task)


def _check_model_name(
    path: str, model: Any, models: Mapping[str, Any], task: str | None
) -> None:
    if not isinstance(model, str) or model not in models:
        raise InvalidInput(
            f"{path}={model!r} is not a model of `models` ({MODELS_FILE}); "
            f"available: {sorted(models)}"
        )
    if missing := missing_package(model):
        raise InvalidInput(f"{path}={model!r} {missing}")
    if model not in MODEL_FACTORIES:
        raise InvalidInput(
            f"{path}={model!r}: no learning algorithm of that name in "
            f"ensemble_bo.core.zoo; known: {sorted(MODEL_FACTORIES)}"
        )
    if task is not None and model_task(model) != task:
        fitting = sorted(name for name in models if model_task(name) == task)
        raise InvalidInput(
            f"{path}={model!r} is a {model_task(model)} model but the data is a "
            f"{task} task; choose one of {fitting}"
        )


# --- a method's parameter blocks ------------------------------------------------------


def check_optimizer(name: str, options: Any, space: SearchSpace) -> None:
    """`<name>.optimizer`: builds an optimizer over `space` (cheap: no GP is fit)."""
    path = f"{name}.optimizer"
    if not isinstance(options, Mapping):
        raise InvalidInput(
            f"{path} must be a mapping such as {{kind: gp, n_initial: 10}}, got "
            f"{options!r}"
        )
    try:
        make_optimizer(space, 0, **options)
    except (TypeError, ValueError) as error:
        raise InvalidInput(
            f"{path}={dict(options)!r}: {error}; see the optimizer block of "
            "conf/base/parameters_segor.yml for the options"
        ) from None


def _as_method(method: str | Method) -> Method:
    if isinstance(method, str):
        # Imported here: core.methods calls these checks.
        from ensemble_bo.core.methods import parse_method  # noqa: PLC0415

        try:
            return parse_method(method)[0]
        except ValueError as error:
            raise InvalidInput(str(error)) from None
    return method


def check_settings(
    method: str | Method,
    parameters: Mapping[str, Any],
    seed: Any = None,
    task: str | None = None,
) -> MethodSettings:
    """Every parameter `method` reads, before anything is trained, parsed into
    the typed settings the method then reads.

    Checks `budget` (int >= 1; with a fidelity schedule, a number > 0),
    `time_budget` (seconds > 0 or null), `max_trial_share` (a share in (0, 1],
    auto or null), `max_initial_failures` (int >= 1 or
    null), `parallel` (core.parameters.ParallelSettings), `seed` if given (int
    >= 0), every model of `models` (its search space builds its estimator),
    each of the method's blocks (Block.parse: unknown keys, counts, losses for
    the method's tasks or for `task`, `ensemble.variant`'s grammar, posterior,
    weighting, time_limit), its `model` (a model of `models` for its tasks, or
    for `task` when the data's task is known; for `auto`, the `default_models`
    entries it uses), its `optimizer` (built over that model's space) and its
    `fidelity` when the number of folds is known. Raises InvalidInput naming
    the first bad value.
    """
    method = _as_method(method)
    missing = [name for name in method.params if name not in parameters]
    if missing:
        raise InvalidInput(
            f"method {method.name!r} reads the parameters {missing}, which were not "
            f"given; given: {sorted(parameters)}"
        )
    if seed is not None:
        check_seed(seed)
    budget = check_budget(
        parameters["budget"], fractional=multi_fidelity(method, parameters)
    )
    try:
        time_budget = check_time_budget(parameters["time_budget"])
    except ValueError as error:
        raise InvalidInput(f"{error}; e.g. --params time_budget=60") from None
    try:
        max_trial_share = check_trial_share(parameters["max_trial_share"])
    except ValueError as error:
        raise InvalidInput(str(error)) from None
    try:
        max_initial_failures = check_max_initial_failures(
            parameters["max_initial_failures"]
        )
        check_row_limit(parameters["max_search_rows"])
    except ValueError as error:
        raise InvalidInput(str(error)) from None
    for name, check in (
        ("voting", check_voting),
        ("final_model", check_final_model),
        ("stacking", check_stacking),
        ("conformal", check_conformal),
    ):
        if name in parameters:
            check(parameters[name])
    try:
        parallel = ParallelSettings.from_block(parameters["parallel"])
    except (TypeError, ValueError) as error:
        raise InvalidInput(str(error)) from None
    if task is not None and task not in method.tasks:
        raise InvalidInput(
            f"{method.name} builds {' or '.join(sorted(method.tasks))} ensembles and "
            f"the data is a {task} task"
        )
    tasks = (task,) if task is not None else tuple(sorted(method.tasks))
    spaces = check_model_spaces(parameters["models"])
    portfolios = _checked_portfolios(parameters, spaces, "portfolios")
    large_data_portfolios = _checked_portfolios(
        parameters, spaces, "large_data_portfolios"
    )
    blocks = {
        name: block.parse(name, parameters[name], tasks)
        for name, block in method.blocks.items()
    }
    _check_search_model(method, parameters, tasks, task, spaces, portfolios)
    n_folds = parameters.get("data_processing", {}).get("n_folds")
    if isinstance(n_folds, int):  # else the data's folds decide, in run_method
        model = parameters[method.search_params]["model"]
        if model == "auto":
            model = parameters["default_models"][task] if task is not None else None
        check_fidelity(method, parameters, n_folds, model)
    return MethodSettings(
        blocks,
        budget,
        time_budget,
        max_trial_share,
        max_initial_failures,
        parallel,
        parameters["models"],
        parameters["default_models"],
        portfolios,
        large_data_portfolios,
        check_inference(parameters["inference"]),
        RevalidationSettings.parse("revalidation", parameters["revalidation"]),
    )


def _checked_portfolios(
    parameters: Mapping[str, Any], spaces: Mapping[str, SearchSpace], key: str
) -> dict[str, list[dict[str, Any]]]:
    """The parameter `key` (portfolios, large_data_portfolios) checked;
    InvalidInput naming its file."""
    try:
        return check_portfolios(parameters[key], spaces, key)
    except ValueError as error:
        raise InvalidInput(f"{error} (conf/base/parameters_{key}.yml)") from None


def check_inference(block: Any) -> dict[str, float | None]:
    """The `inference` block: max_seconds_per_1000_rows and max_model_mb,
    each a positive number or null; InvalidInput naming a bad or unknown key."""
    if not isinstance(block, Mapping):
        raise InvalidInput(
            f"inference={block!r} is not a mapping of max_seconds_per_1000_rows "
            "and max_model_mb"
        )
    known = ("max_seconds_per_1000_rows", "max_model_mb")
    unknown = [key for key in block if key not in known]
    if unknown:
        raise InvalidInput(
            f"inference: unknown key {unknown[0]!r}{did_you_mean(unknown, known)}; "
            f"known: {list(known)}"
        )
    limits = {key: block.get(key) for key in known}
    try:
        InferenceBudget(**limits)
    except ValueError as error:
        raise InvalidInput(str(error)) from None
    return limits


def multi_fidelity(method: Method, settings: Mapping[str, Any]) -> bool:
    """Whether the method's search block asks for a fidelity schedule."""
    block = settings.get(method.search_params, {}).get("fidelity")
    return isinstance(block, Mapping) and block.get("scheduler", "none") != "none"


def check_fidelity(
    method: Method, settings: Mapping[str, Any], n_folds: int, model: str | None
) -> FidelitySettings | None:
    """`<search block>.fidelity` (core.fidelity), for a search on `n_folds` folds
    of the model `model`.

    The iterations resource needs the space (its n_estimators or max_iter):
    with `model` None (`auto` before the task is known) such a block is left
    for the call that knows it, and None returned.
    """
    path = f"{method.search_params}.fidelity"
    block = settings[method.search_params].get("fidelity")
    iteration_setting = None
    if isinstance(block, Mapping) and block.get("resource") == "iterations":
        if model is None:
            return None
        iteration_setting = _iteration_setting(path, model, settings["models"])
    try:
        fidelity = FidelitySettings.from_block(
            block, n_folds=n_folds, iteration_setting=iteration_setting
        )
    except (TypeError, ValueError) as error:
        raise InvalidInput(f"{path}={block!r}: {error}") from None
    return fidelity


def _iteration_setting(
    path: str, model: str, spaces: Mapping[str, Any]
) -> tuple[str, int]:
    """(name, count) of the setting that counts `model`'s training iterations:
    a constant of its space, the full fidelity of the iterations resource."""
    name = ITERATION_SETTINGS.get(model)
    if name is None:
        raise InvalidInput(
            f"{path}.resource='iterations': the model {model!r} has no setting "
            "that counts training iterations for every configuration; it applies to "
            f"{', '.join(sorted(ITERATION_SETTINGS))} (their n_estimators or "
            f"max_iter). For {model!r} use resource folds or rows"
        )
    spec = spaces.get(model, {}).get(name)
    value = spec.get("value") if isinstance(spec, Mapping) else None
    if (
        not isinstance(spec, Mapping)
        or spec.get("type") != "constant"
        or isinstance(value, bool)
        or not isinstance(value, Integral)
        or value < 1
    ):
        raise InvalidInput(
            f"{path}.resource='iterations' grows models.{model}.{name}, which must "
            f"then be a constant whole number >= 1 (the full fidelity), got {spec!r} "
            f"({MODELS_FILE})"
        )
    return name, int(value)


def _check_search_model(
    method: Method,
    settings: Mapping[str, Any],
    tasks: tuple[str, ...],
    task: str | None,
    spaces: Mapping[str, SearchSpace],
    portfolios: Mapping[str, Sequence[Mapping[str, Any]]],
) -> None:
    """The search block's `model` (and `auto`'s defaults) and its `optimizer`
    (with the model's portfolio, when it asks for one)."""
    block = settings[method.search_params]
    for key in ("model", "optimizer"):
        if key not in block:
            raise InvalidInput(
                f"{method.search_params}.{key} is missing; see "
                f"conf/base/parameters_{method.search_params}.yml"
            )
    model = block["model"]
    path = f"{method.search_params}.model"
    if model == "auto":
        if not isinstance(settings["default_models"], Mapping):
            raise InvalidInput(
                f"{path}='auto' takes the task's space from default_models, which is "
                f"not a mapping: {settings['default_models']!r} ({MODELS_FILE})"
            )
        for each in tasks:
            _check_model_name(
                f"default_models.{each}",
                settings["default_models"].get(each),
                settings["models"],
                each,
            )
        model = settings["default_models"][tasks[0]]
    else:
        _check_model_name(path, model, settings["models"], task)
        if task is None and model_task(model) not in method.tasks:
            raise InvalidInput(
                f"{path}={model!r} is a {model_task(model)} model and "
                f"{method.name} builds {' or '.join(sorted(method.tasks))} ensembles"
            )
    try:
        options = method.optimizer_options(
            block["optimizer"], portfolios.get(model, ())
        )
    except (TypeError, ValueError) as error:  # not a mapping, an unknown preset
        raise InvalidInput(f"{method.search_params}.optimizer: {error}") from None
    check_optimizer(method.search_params, options, spaces[model])
