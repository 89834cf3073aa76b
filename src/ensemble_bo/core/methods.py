"""The method registry: every method of the papers, and the one way to run one.

A `Method` says which tasks it serves, which parameter blocks it reads (the
blocks of conf/base/parameters_<name>.yml), how it builds its search from an
optimizer and an evaluator, and which selection stage (if any) turns the
search's pool into the final ensemble. `METHODS` holds them all; the Kedro
pipelines, the benchmark's method list and the Python API derive from it, so
adding a method is one entry here plus its parameters file.

`run_method` is where a method runs, for every caller: it checks the task,
resolves the model, seeds the optimizer, the models and the strategy
from the run's seed, runs the search and its selection stage.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from ensemble_bo.core.evaluation import CrossValidation
from ensemble_bo.core.inference_budget import (
    InferenceBudget,
    RefitSizeScale,
    ensemble_predict_seconds,
    refit_size_scale,
)
from ensemble_bo.core.journal import ReplayingRunner, TrialJournal
from ensemble_bo.core.optimizer_kinds import make_optimizer
from ensemble_bo.core.preparation import ModelInput
from ensemble_bo.core.results import (
    BAGGED_ACTION,
    EnsembleSearchResult,
    SearchInterrupted,
    join_selection,
)
from ensemble_bo.core.revalidation import NothingRevalidated, revalidate
from ensemble_bo.core.row_capped import fits_superlinearly, rounds_growth
from ensemble_bo.core.runners import trial_runner
from ensemble_bo.core.search import Callback, Search
from ensemble_bo.core.seeding import derive_seed
from ensemble_bo.core.selection.stages import (
    BaggedMembers,
    PosthocSettings,
    agnostic_bayes_selection,
    bagged_reweighted,
    bfgs_reweighted,
    posthoc_selection,
)
from ensemble_bo.core.settings import (
    SHARED_PARAMS,
    Block,
    InvalidInput,
    MethodSettings,
    SearchSettings,
    did_you_mean,
)
from ensemble_bo.core.space import SearchSpace
from ensemble_bo.core.strategies import (
    ESMBO_ENSEMBLES,
    EnsembleSettings,
    ErsSettings,
    Esmbo,
    EsmboSettings,
    Sego,
    Segor,
    SegorSettings,
    SegoSettings,
    SingleBest,
    SingleBestSettings,
    Strategy,
    segor_variant,
)
from ensemble_bo.core.time_budget import (
    TimeBudget,
    deadline_for,
    effective_trial_share,
)
from ensemble_bo.core.trials import TrialRequest
from ensemble_bo.core.validation import check_fidelity, check_settings
from ensemble_bo.core.workers import WorkerEvaluator
from ensemble_bo.core.zoo import make_model

REGRESSION = frozenset({"regression"})
CLASSIFICATION = frozenset({"classification"})
ANY_TASK = REGRESSION | CLASSIFICATION

# Parameters as conf/base holds them: the project's parameter blocks by name
# (`segor`, `ensemble`, `posthoc`, ...), plus SHARED_PARAMS, which every
# method reads; run_method parses them into MethodSettings.
Parameters = Mapping[str, Any]


@dataclass(frozen=True)
class SearchParts:
    """What a method's `build_strategy` gets: the data, its settings and seed."""

    data: ModelInput
    settings: MethodSettings
    seed: int
    block_name: str  # the method's own parameter block
    model_name: str  # the searched model (zoo)
    # How many initial-design points the method's optimizer draws (0: none).
    n_initial: int = 0

    @property
    def search(self) -> Any:
        """The method's own block (a core.settings.SearchSettings)."""
        return self.settings.blocks[self.block_name]


@dataclass(frozen=True)
class Selection:
    """A stage that chooses an ensemble from a finished search's pool.

    `select(source, data, block, seed, budget)` reads the parameter block
    `params`, parsed as a `settings` (core.settings.Block), and keeps the
    inference `budget` (core.inference_budget); `applies(block)` says whether
    it runs (otherwise the search's own ensemble is the result).
    """

    name: str
    params: str
    settings: type[Block]
    select: Callable[
        [EnsembleSearchResult, ModelInput, Any, int, InferenceBudget],
        EnsembleSearchResult,
    ]
    applies: Callable[[Any], bool] = lambda block: True


@dataclass(frozen=True)
class Method:
    """One method of the papers: its tasks, its parameters, its search, its selection.

    search_params: the block with the search's `model`, `optimizer`,
    `time_limit` and `display_name` (its own parameters file), parsed as a
    `search_settings`; extra_params: other blocks its search reads, with the
    settings each is parsed as; variant: applies a `name:<variant>` suffix to
    the parameters (None: no suffix).
    """

    name: str
    summary: str
    tasks: frozenset[str]
    search_params: str
    search_settings: type[SearchSettings]
    build_strategy: Callable[[SearchParts], Strategy]
    extra_params: Mapping[str, type[Block]] = field(default_factory=dict)
    selection: Selection | None = None
    variant: Callable[[Parameters, str], dict[str, Any]] | None = None
    # What `optimizer.preset: paper` sets: the GP of the method's paper.
    paper_optimizer: Mapping[str, Any] = field(default_factory=dict)
    # The block whose `weighting` (counts | bfgs) reweighs the final ensemble.
    weighting_params: str | None = None
    # Under limits, whether its ensemble is also selected again post hoc from
    # the whole pool within them, the lower CV loss of the two kept (a
    # slot-by-slot constraint locks in members placed early).
    reselects_under_budget: bool = False
    # Whether its ensemble may be chosen again on fresh splits of the best
    # configurations (core.revalidation): a weighted mean or vote of pool
    # models chosen by their CV loss.
    revalidates: bool = False

    def optimizer_options(
        self,
        options: Mapping[str, Any],
        portfolio: Sequence[Mapping[str, Any]] = (),
    ) -> dict[str, Any]:
        """The search block's `optimizer` options, `preset: paper` and
        `portfolio` expanded.

        The preset's entries override the block's; other options (n_candidates,
        ...) stay. A method without a paper GP (random search) ignores it.
        `portfolio: true` (absent: false) starts the initial design with
        `portfolio`, the configurations a search of the space starts from
        (start_portfolio: its portfolio, core.portfolio, after its large-data
        start on a sample of large data), as `initial_configs`; the paper
        preset keeps the papers' start, without one.
        """
        options = dict(options)
        preset = options.pop("preset", None)
        if preset not in (None, "paper"):
            raise ValueError(
                f"{self.search_params}.optimizer.preset={preset!r} is not 'paper' "
                "or absent"
            )
        use_portfolio = options.pop("portfolio", False)
        if not isinstance(use_portfolio, bool):
            raise ValueError(
                f"{self.search_params}.optimizer.portfolio={use_portfolio!r} is not "
                "true or false"
            )
        if preset == "paper" and options.get("kind", "gp") == "gp":
            options |= self.paper_optimizer
        elif use_portfolio and portfolio:
            options["initial_configs"] = [dict(config) for config in portfolio]
        return options

    @property
    def blocks(self) -> dict[str, type[Block]]:
        """The settings of every parameter block the method reads, its own first."""
        blocks = {self.search_params: self.search_settings, **self.extra_params}
        if self.selection is not None:
            blocks.setdefault(self.selection.params, self.selection.settings)
        return blocks

    @property
    def params(self) -> tuple[str, ...]:
        """Every parameter the method reads: its blocks, then SHARED_PARAMS."""
        return (*self.blocks, *SHARED_PARAMS)

    def check_task(self, task: str, dataset: str) -> None:
        if task in self.tasks:
            return
        others = [m.name for m in METHODS.values() if task in m.tasks]
        raise ValueError(
            f"dataset {dataset!r} is a {task} task and {self.name} builds "
            f"{' or '.join(sorted(self.tasks))} ensembles; methods for {task}: "
            f"{others}"
        )


def inference_budget(
    limits: Mapping[str, float | None], data: ModelInput, model_name: str
) -> InferenceBudget:
    """The inference budget of a search of `model_name` on `data`: the
    `inference` block's limits, each trial's measured size scaled to its
    member refit on the data's training rows as its model grows with them
    (core.inference_budget.RefitSizeScale): on all of them, on the search's
    rows for a row-capped member, by the most its rounds grow for histogram
    boosting (core.row_capped.large_data_refit), not for a model of bounded
    size."""
    scale = RefitSizeScale(
        model_name,
        rows=refit_size_scale(data.fold_ids, data.sampled_from),
        capped=refit_size_scale(data.fold_ids),
        rounds=rounds_growth(len(data.fold_ids), data.sampled_from),
    )
    return InferenceBudget(**limits, size_scale=scale)


def _single_best(parts: SearchParts) -> Strategy:
    return SingleBest(
        parts.data.target,
        parts.data.fold_ids,
        loss=parts.search.loss,
        task=parts.data.task,
        budget=inference_budget(parts.settings.inference, parts.data, parts.model_name),
    )


def _segor(parts: SearchParts) -> Strategy:
    ensemble = parts.settings.blocks["ensemble"]
    sizing, loss = segor_variant(ensemble.variant)
    return Segor(
        parts.data.target,
        parts.data.fold_ids,
        ensemble_size=ensemble.size,
        loss=loss,
        sizing=sizing,
        budget=inference_budget(parts.settings.inference, parts.data, parts.model_name),
    )


def _segor_with_variant(settings: Parameters, variant: str) -> dict[str, Any]:
    """`segor:<variant>` sets `ensemble.variant` (e.g. f-m, g-h, d-t)."""
    segor_variant(variant)  # raises for an unknown sizing or loss, naming it
    return {**settings, "ensemble": {**settings["ensemble"], "variant": variant}}


def _loss_variant(block: str) -> Callable[[Parameters, str], dict[str, Any]]:
    """`<method>:<loss>` sets `<block>.loss` (e.g. sego:log_loss, smbo_posthoc:brier);
    check_settings then refuses a loss that does not fit the data's task."""

    def with_loss(settings: Parameters, loss: str) -> dict[str, Any]:
        return {**settings, block: {**settings[block], "loss": loss}}

    return with_loss


def _esmbo_variant(settings: Parameters, variant: str) -> dict[str, Any]:
    """`esmbo:<ensemble>` sets `esmbo.ensemble` (esmbo:replica_winners), any
    other `esmbo:<loss>` its loss."""
    if variant in ESMBO_ENSEMBLES:
        return {**settings, "esmbo": {**settings["esmbo"], "ensemble": variant}}
    # Anything else is a loss; check_settings names both readings if it is none.
    return _loss_variant("esmbo")(settings, variant)


def _sego(parts: SearchParts) -> Strategy:
    return Sego(
        parts.data.target,
        parts.data.fold_ids,
        ensemble_size=parts.search.ensemble_size,
        loss=parts.search.loss,
        budget=inference_budget(parts.settings.inference, parts.data, parts.model_name),
    )


def _esmbo(parts: SearchParts) -> Strategy:
    return Esmbo(
        parts.data.target,
        parts.data.fold_ids,
        n_replicas=parts.search.n_replicas,
        loss=parts.search.loss,
        seed=derive_seed(parts.seed, "bootstrap replicas"),
        task=parts.data.task,
        rho=parts.search.rho,
        # rho is tuned once the initial design is in, and on at least 10 trials:
        # the paper preset's design has 2, too few models to weigh.
        rho_tuned_at=max(parts.n_initial, 10),
        n_posterior_samples=parts.search.n_samples,
        budget=inference_budget(parts.settings.inference, parts.data, parts.model_name),
    )


def _posthoc(
    source: EnsembleSearchResult,
    data: ModelInput,
    block: PosthocSettings,
    seed: int,
    budget: InferenceBudget,
) -> EnsembleSearchResult:
    return posthoc_selection(
        source,
        data.target,
        data.fold_ids,
        loss=block.loss,
        max_size=block.max_size,
        warm_start=block.warm_start,
        weighting=block.weighting,
        budget=budget,
        seed=derive_seed(seed, BAGGING),
    )


def _agnostic_bayes(
    source: EnsembleSearchResult,
    data: ModelInput,
    block: ErsSettings | EsmboSettings,
    seed: int,
    budget: InferenceBudget,
) -> EnsembleSearchResult:
    return agnostic_bayes_selection(
        source,
        data.target,
        data.fold_ids,
        loss=block.loss,
        posterior=block.posterior,
        n_samples=block.n_samples,
        seed=derive_seed(seed, "agnostic bayes"),
        budget=budget,
    )


# `optimizer.preset: paper`. SEGO s.4 and SEGOR s.2.3 slice-sample the GP's
# hyperparameters and integrate EI over the samples (Snoek et al. 2012); ESMBO
# s.6 fits SMBO's and ESMBO's GP by maximizing the marginal likelihood. All ran
# Spearmint, whose chooser starts the GP once 2 evaluations are in (its first
# points come from its Sobol grid).
SLICE_SAMPLED_GP = {"hyperparameters": "slice", "acquisition": "ei", "n_initial": 2}
MARGINAL_LIKELIHOOD_GP = {"hyperparameters": "ml2", "acquisition": "ei", "n_initial": 2}

# Selection stages, by name; `posthoc` also runs on its own over a saved pool.
POSTHOC = Selection("posthoc", "posthoc", PosthocSettings, _posthoc)
AGNOSTIC_BAYES = Selection("agnostic_bayes", "ers", ErsSettings, _agnostic_bayes)
# ESMBO's final ensemble: its whole pool weighed by the agnostic Bayes posterior
# (`esmbo.ensemble: posterior`), or the replicas' winners of Alg. 2.
ESMBO_POSTERIOR = Selection(
    "agnostic_bayes",
    "esmbo",
    EsmboSettings,
    _agnostic_bayes,
    applies=lambda block: block.ensemble == "posterior",
)
# Selections that also run on their own, over the pool an earlier run saved.
SAVED_POOL_SELECTIONS = (POSTHOC,)

METHODS: dict[str, Method] = {
    method.name: method
    for method in (
        Method(
            "segor",
            "SEGOR: ensemble-aware GP-EI for regression; fixed, best-growing or "
            "best-dynamic size; MSE, Huber or Tukey loss (Roschewitz et al. 2017)",
            REGRESSION,
            "segor",
            SegorSettings,
            _segor,
            extra_params={"ensemble": EnsembleSettings},
            variant=_segor_with_variant,
            paper_optimizer=SLICE_SAMPLED_GP,
            weighting_params="ensemble",
            reselects_under_budget=True,
            revalidates=True,
        ),
        Method(
            "sego",
            "SEGO: ensemble-aware GP-EI for classification (Lévesque et al. "
            "2016); by default on the log-loss of the members' mean "
            "probabilities, or on the paper's squared margin of the majority "
            "vote, the vote's error or the Brier score (sego:<loss>)",
            CLASSIFICATION,
            "sego",
            SegoSettings,
            _sego,
            variant=_loss_variant("sego"),
            paper_optimizer=SLICE_SAMPLED_GP,
            weighting_params="sego",
            reselects_under_budget=True,
            revalidates=True,
        ),
        Method(
            "esmbo",
            "ESMBO: round-robin GP-EI over bootstrap replicas of ceil(rho n) "
            "samples, then an agnostic Bayes ensemble of its pool or of the "
            "replicas' winners (Lacoste et al. 2014, Alg. 2)",
            ANY_TASK,
            "esmbo",
            EsmboSettings,
            _esmbo,
            selection=ESMBO_POSTERIOR,
            variant=_esmbo_variant,
            paper_optimizer=MARGINAL_LIKELIHOOD_GP,
            weighting_params="esmbo",
        ),
        Method(
            "ers",
            "ERS: agnostic Bayes ensemble over a random-search pool "
            "(Lacoste et al. 2014, s.6)",
            ANY_TASK,
            "ers",
            ErsSettings,
            _single_best,
            selection=AGNOSTIC_BAYES,
            variant=_loss_variant("ers"),
            weighting_params="ers",
        ),
        Method(
            "smbo",
            "SMBO: GP-EI for the single best model (`s-m`, `BO-best`)",
            ANY_TASK,
            "smbo",
            SingleBestSettings,
            _single_best,
            paper_optimizer=MARGINAL_LIKELIHOOD_GP,
        ),
        Method(
            "smbo_posthoc",
            "SMBO, then greedy post-hoc selection with replacement over its pool "
            "(`s-m-ph`, `BO-post`)",
            ANY_TASK,
            "smbo",
            SingleBestSettings,
            _single_best,
            selection=POSTHOC,
            variant=_loss_variant("posthoc"),
            paper_optimizer=MARGINAL_LIKELIHOOD_GP,
        ),
        Method(
            "random_search",
            "random search for the single best model (RS)",
            ANY_TASK,
            "random_search",
            SingleBestSettings,
            _single_best,
        ),
    )
}


# Each task's ensemble method: what the Python API's method="auto" picks.
TASK_METHODS = {"regression": "segor", "classification": "sego"}
# What `kedro run` runs without --pipelines (its bundled dataset is a regression).
DEFAULT_METHOD = TASK_METHODS["regression"]

# The top-level parameters that are not a method's block: what the pipelines
# and the benchmark read besides the methods (SHARED_PARAMS).
OTHER_PARAMS = (
    "dataset",
    "seed",
    "voting",
    "final_model",
    "stacking",
    "conformal",
    "conformal_rows",
    "split_conformal_above",
    "resume",
    "data_processing",
    "posthoc_source",
    "benchmark",
)


def parameter_blocks() -> dict[str, type[Block]]:
    """The settings of every block a registered method or selection reads."""
    blocks: dict[str, type[Block]] = {}
    for method in METHODS.values():
        blocks |= method.blocks
    for selection in SAVED_POOL_SELECTIONS:
        blocks[selection.params] = selection.settings
    return blocks


def parameter_names() -> tuple[str, ...]:
    """Every top-level parameter the project reads."""
    return (*parameter_blocks(), *SHARED_PARAMS, *OTHER_PARAMS)


def check_parameter_names(parameters: Mapping[str, Any]) -> None:
    """Every top-level parameter is one the project reads, and every method
    block's keys are its own: a misspelled name (`time_budjet`, `segor.foo`,
    `ensemble.varient`) is refused, naming the known ones, rather than ignored."""
    known = parameter_names()
    unknown = sorted(str(name) for name in parameters if name not in known)
    if unknown:
        raise InvalidInput(
            f"unknown parameter {' and '.join(map(repr, unknown))}"
            f"{did_you_mean(unknown, known)}; the parameters are {sorted(known)} "
            "(conf/base/parameters*.yml)"
        )
    for name, settings in parameter_blocks().items():
        if name in parameters:
            settings.parse(name, parameters[name], ("regression", "classification"))


def parse_method(spec: str | Method) -> tuple[Method, str | None]:
    """`"segor:g-m"` -> (METHODS["segor"], "g-m"); unknown names are refused."""
    if isinstance(spec, Method):
        return spec, None
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"{spec!r} is not a method name; known: {sorted(METHODS)}")
    name, separator, variant = spec.strip().partition(":")
    if name not in METHODS:
        raise ValueError(
            f"unknown method {spec!r}; known methods: {sorted(METHODS)} "
            "(with a ':<variant>' suffix where a method takes one, e.g. 'segor:g-m')"
        )
    method = METHODS[name]
    if separator and not variant:
        raise ValueError(f"method {spec!r} has an empty variant after ':'")
    if separator and method.variant is None:
        raise ValueError(f"method {spec!r}: {name!r} takes no ':<variant>' suffix")
    return method, variant or None


def method_settings(spec: str | Method, parameters: Parameters) -> dict[str, Any]:
    """The blocks `spec` reads from `parameters`, its variant applied.

    Raises naming the first missing block.
    """
    method, variant = parse_method(spec)
    missing = [name for name in method.params if name not in parameters]
    if missing:
        raise ValueError(
            f"method {method.name!r} reads the parameters {missing[0]!r}, which "
            f"were not given; given: {sorted(parameters)}"
        )
    chosen = {name: parameters[name] for name in method.params}
    return chosen if variant is None else method.variant(chosen, variant)


def resolve_model(search: SearchSettings, task: str, settings: MethodSettings) -> str:
    """The model a search tunes: its `model`, or the task's default for `auto`
    (both checked by `check_settings` first)."""
    if search.model == "auto":
        return settings.default_models[task]
    return search.model


def start_portfolio(
    settings: MethodSettings, model: str, data: ModelInput
) -> tuple[Mapping[str, Any], ...]:
    """The configurations a search of `model` on `data` may evaluate first: its
    portfolio; on a sample of large data, its large-data portfolio, then its
    portfolio less its kernel machines (row_capped.fits_superlinearly) and
    less what the large-data portfolio already holds (both hold histogram
    boosting at scikit-learn's defaults), each trained once.

    The portfolios were chosen on datasets under 2,000 rows, where an SVR is
    cheap; on a 20,000-row sample its SVR took 18 s (of a 60 s budget) and
    77 s a trial, the most of any configuration, to a CV loss 1.6 to 14 times
    the best's (benchmarks/results/large_data_start.md). The optimizer may
    still propose one.
    """
    portfolio = tuple(settings.portfolios.get(model, ()))
    if data.sampled_from is None:
        return portfolio
    large_data = tuple(settings.large_data_portfolios.get(model, ()))
    return (
        *large_data,
        *(
            c
            for c in portfolio
            if c not in large_data
            and not fits_superlinearly(make_model(model, dict(c), 0))
        ),
    )


def search_cross_validation(model: str, data: ModelInput, seed: int) -> CrossValidation:
    """How a search of `model` on `data` evaluates a configuration: k-fold CV
    on the data's folds, the models seeded from `seed`."""
    return CrossValidation(
        model,
        data.features,
        data.target,
        data.fold_ids,
        random_state=derive_seed(seed, "models"),
        # histogram gradient boosting takes the code columns as categories
        model_factory=partial(
            make_model, categorical_features=data.encoding.categorical_features
        ),
    )


def run_method(
    method: str | Method,
    data: ModelInput,
    parameters: Parameters,
    seed: int,
    callbacks: Iterable[Callback] = (),
    journal: TrialJournal | None = None,
    final_fit_factor: float = 0.0,
) -> EnsembleSearchResult:
    """Run a method on `data`: search, then its selection stage if it has one.

    method: a Method or its name (`"segor"`, `"segor:g-m"`); parameters: the
    parameter blocks it reads (`Method.params`), as in conf/base, parsed and
    checked here before anything is trained (core.validation.check_settings);
    seed: every random choice (optimizer, models, bootstrap replicas,
    posteriors) derives from it, so the same seed, data and parameters give
    the same ensemble.
    Each callback gets every iteration's record as the search runs; after a
    selection stage, the last iteration's record again, carrying the selected
    ensemble. A stopped search raises SearchInterrupted holding its pool.
    With a `journal`, every finished trial is recorded in it, and the trials it
    already holds (from a search that was stopped) are not trained again: the
    result is the one an uninterrupted search gives (`trials_reused` counts them).
    With a `time_budget` (seconds), the search also ends once that wall time
    is spent (core.time_budget), less what the final model's fit will take:
    `final_fit_factor` (core.refit.final_fit_factor; 0: nothing kept back)
    times the trial seconds of the ensemble's distinct members; the selection
    stage is not counted.
    SEGOR's and SEGO's ensemble is chosen again on fresh k-fold splits of
    the best configurations where `revalidation` asks (core.revalidation):
    the search then leaves its `time_share` of the time budget to them.
    The `parallel` block says where the trials train (core.runners): one at
    a time, on local worker processes or on a Dask cluster, in sync or async
    batches; a journal of an async search gives back its trials in the order
    they ended, and the search goes on from there.
    """
    chosen, _ = parse_method(method)
    parameters = method_settings(method, parameters)
    chosen.check_task(data.task, data.name)
    settings = check_settings(chosen, parameters, seed, data.task)
    search = settings.blocks[chosen.search_params]
    model = resolve_model(search, data.task, settings)
    optimizer = make_optimizer(
        SearchSpace.from_dict(settings.models[model]),
        derive_seed(seed, "optimizer"),
        **chosen.optimizer_options(
            search.optimizer, start_portfolio(settings, model, data)
        ),
    )
    revalidation = settings.revalidation
    revalidating = chosen.revalidates and revalidation.active and not data.given_folds
    search_seconds = settings.time_budget
    if revalidating and search_seconds is not None:
        # the search leaves re-validation its share of the budget
        search_seconds *= 1 - revalidation.time_share
    time_budget = TimeBudget(
        search_seconds,
        trial_share=effective_trial_share(
            settings.max_trial_share, sampled=data.sampled_from is not None
        ),
        final_fit_factor=final_fit_factor,
    )
    evaluate = WorkerEvaluator(
        search_cross_validation(model, data, seed), time_limit=search.time_limit
    )
    callbacks = list(callbacks)
    parallel = settings.parallel
    fidelity = check_fidelity(
        chosen, parameters, len(set(data.fold_ids.tolist())), model
    )
    # A multi-fidelity search trains each rung as a batch whose results it
    # takes in proposal order, whatever the mode: a sync search's replay.
    mode = "sync" if parallel.serial or fidelity.enabled else parallel.mode
    # The budget counts from here: starting the workers is the search's time.
    time_budget.start()
    with trial_runner(parallel, evaluate) as started:
        runner = (
            started
            if journal is None
            else ReplayingRunner(
                started,
                journal,
                time_budget,
                replay="completions" if mode == "async" else "proposals",
            )
        )
        strategy = chosen.build_strategy(
            SearchParts(
                data,
                settings,
                seed,
                chosen.search_params,
                model,
                n_initial=getattr(optimizer, "n_initial", 0),
            )
        )
        final_members = None
        if weighting_of(chosen, settings) == "bagged":
            final_members = BaggedMembers(
                strategy.scorer.objective,
                strategy.scorer.target,
                data.fold_ids,
                derive_seed(seed, BAGGING),
            )
        result = Search(strategy, optimizer, evaluate, final_members).run(
            settings.budget,
            callbacks,
            model_name=model,
            max_initial_failures=settings.max_initial_failures,
            time_budget=time_budget,
            runner=runner,
            mode=mode,
            fidelity=fidelity,
        )
    if journal is not None:
        result.trials_reused = runner.reused
    if data.sampled_from is not None:
        result.search_metrics = {
            **result.search_metrics,
            "search_sample_rows": float(len(data.target)),
        }
    budget = inference_budget(settings.inference, data, model)
    if revalidating:
        result = _revalidated(result, data, settings, seed, search, time_budget, budget)
    final = result
    selection = chosen.selection
    if selection is not None and selection.applies(settings.blocks[selection.params]):
        block = settings.blocks[selection.params]
        try:
            selected = selection.select(
                result,
                data,
                block,
                seed,
                budget,
            )
        except Exception as error:
            raise SearchInterrupted(result, settings.budget, error) from error
        final = join_selection(result, selected)
    if budget.active:
        final = _within_budget(
            chosen,
            final,
            data,
            budget,
            settings.budget,
            # a re-validated ensemble was chosen within the budget already
            reselect=not final.search_metrics.get("revalidated_configurations"),
        )
    final = _weighted(final, weighting_of(chosen, settings), data, seed, budget)
    if final is not result and final.history:
        for callback in callbacks:
            callback(final.history[-1])
    return final


def _revalidated(
    result: EnsembleSearchResult,
    data: ModelInput,
    settings: MethodSettings,
    seed: int,
    search: SearchSettings,
    search_budget: TimeBudget,
    budget: InferenceBudget,
) -> EnsembleSearchResult:
    """The search's result with its ensemble chosen again on fresh splits
    (core.revalidation), the candidates' trials (each on every split, best
    candidate first) run where the search's ran and cut where the whole time
    budget ends, less the time the search kept back for the final fit
    (`search_budget` is the search's share of it, started with the search);
    unchanged (the metrics saying so) where no configuration
    trained on every split. The ensemble is chosen within the inference
    `budget`."""
    # a trial covers every fresh split: its limits are the search's per split
    repeats = settings.revalidation.repeats
    share = search_budget.trial_share
    whole_budget = TimeBudget(
        settings.time_budget,
        trial_share=None if share is None else min(1.0, share * repeats),
        final_fit_factor=search_budget.final_fit_factor,
    )
    whole_budget.reserve = search_budget.reserve
    whole_budget.start()
    whole_budget.charge(search_budget.elapsed)
    time_limit = None if search.time_limit is None else search.time_limit * repeats

    def evaluate_splits(fold_sets, configs):
        evaluator = WorkerEvaluator(
            replace(
                search_cross_validation(result.model_name, data, seed),
                fold_ids=fold_sets,  # repeated k-fold: one trial, every split
            ),
            time_limit=time_limit,
        )
        deadline = deadline_for(whole_budget, first=False)
        with trial_runner(settings.parallel, evaluator) as runner:
            for ticket, config in enumerate(configs):
                runner.submit(TrialRequest(ticket, config, deadline=deadline))
            finished = dict(runner.next_finished() for _ in configs)
        return [finished[ticket] for ticket in range(len(configs))]

    try:
        revalidated = revalidate(
            result, data, settings.revalidation, seed, evaluate_splits, budget
        )
    except NothingRevalidated:
        result.search_metrics = {
            **result.search_metrics,
            "revalidation_splits": float(settings.revalidation.repeats),
            "revalidated_configurations": 0.0,
        }
        return result
    return join_selection(result, revalidated)


def _within_budget(
    method: Method,
    result: EnsembleSearchResult,
    data: ModelInput,
    budget: InferenceBudget,
    trials: float,
    reselect: bool = True,
) -> EnsembleSearchResult:
    """The search's ensemble under an inference budget: for a method that
    reselects (and `reselect`), where the budget turned a best candidate away, the lower CV
    loss of it and of greedy post-hoc selection from the whole pool within
    the budget (`inference_budget_reselected` says which; a budget that
    refused nothing left the ensemble as it would be without it). A search
    that found no model within the budget is interrupted, keeping its pool,
    with the cheapest model's costs."""
    refused = result.search_metrics.get("inference_budget_skipped", 0.0) > 0
    if method.reselects_under_budget and reselect and refused:
        try:
            selected = posthoc_selection(
                result,
                data.target,
                data.fold_ids,
                loss=result.objective or "auto",
                budget=replace(budget, skipped=0),
            )
        except ValueError:  # no model fits on its own: nothing to select
            selected = None
        own = result.history[-1].ensemble_loss if result.history else math.nan
        better = selected is not None and not (
            selected.history[-1].ensemble_loss >= own  # False for a NaN own loss
        )
        reselected = {"inference_budget_reselected": float(better)}
        if better:
            selected = replace(selected, search_metrics=reselected)
            result = join_selection(result, selected)
        else:
            result.search_metrics = {**result.search_metrics, **reselected}
    if not result.members and not result.weights:
        costs = budget.costs(result.pool)[result.pool.ok]
        cheapest = costs.min(axis=0) if len(costs) else [math.nan, math.nan]
        raise SearchInterrupted(
            result,
            trials,
            ValueError(
                f"no trained model fits the inference budget (max "
                f"{budget.max_seconds_per_1000_rows} s per 1,000 rows, max "
                f"{budget.max_model_mb} MB): the cheapest take {cheapest[0]:.4g} s "
                f"per 1,000 rows and {cheapest[1]:.4g} MB; raise the limits"
            ),
        )
    return result


# The derive_seed name of a bagged weighting's bootstrap resamples.
BAGGING = "bagged_selection"


def weighting_of(chosen: Method, settings: MethodSettings) -> str | None:
    """The method's final weighting (counts, bfgs, bagged); None: it has none."""
    block = chosen.weighting_params
    return None if block is None else settings.blocks[block].weighting


def _weighted(
    result: EnsembleSearchResult,
    weighting: str | None,
    data: ModelInput,
    seed: int,
    budget: InferenceBudget,
) -> EnsembleSearchResult:
    """The ensemble reweighted as `weighting` says, its last record carrying
    the new CV loss: by BFGS, or chosen again from the pool by bagged
    selection within the inference `budget` (its size too); unchanged for
    counts or no weighting, and a bagged one where re-validation chose the
    ensemble on fresh splits (which the pool's folds would undo)."""
    if weighting == "bfgs":
        weighted, loss = bfgs_reweighted(result, data.fold_ids)
        history = weighted.history[:-1] + [
            replace(weighted.history[-1], action="weigh", ensemble_loss=loss)
        ]
        return replace(weighted, history=history)
    revalidated = result.search_metrics.get("revalidated_configurations")
    if weighting != "bagged" or revalidated or not result.pool.ok.any():
        return result
    weighted, loss = bagged_reweighted(
        result, data.fold_ids, derive_seed(seed, BAGGING), budget
    )
    members = list(weighted.member_weights)
    history = weighted.history[:-1] + [
        replace(
            weighted.history[-1],
            action=BAGGED_ACTION,
            ensemble_loss=loss,
            ensemble_size=len(members),
            ensemble_predict_seconds=ensemble_predict_seconds(result.pool, members),
        )
    ]
    return replace(weighted, history=history)
