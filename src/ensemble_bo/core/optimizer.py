"""Ask/tell optimizers over a SearchSpace, minimizing: GP-EI, random and grid search.

All share one history of told points (`Optimizer`), so strategies can switch
between them and warm-start any of them from an earlier run's observations.
"""

from __future__ import annotations

import copy
import math
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
from scipy.stats import qmc
from threadpoolctl import threadpool_limits

from ensemble_bo.core.acquisition import (
    log_integrated_expected_improvement,
    log_integrated_expected_improvement_and_partials,
    lower_confidence_bound,
    maximize_acquisition,
)
from ensemble_bo.core.gaussian_process import GaussianProcess
from ensemble_bo.core.sampled_gaussian_process import SampledGaussianProcess
from ensemble_bo.core.space import SearchSpace


@dataclass(frozen=True)
class Suggestion:
    """A configuration to evaluate next.

    `encoded` is its point in [0, 1]^dim (shape (dim,)), exactly as the space
    encodes the configuration; `acquisition_value` is the acquisition that
    chose it (EI, EI per predicted second, or the negated lower confidence
    bound), NaN when no model did.
    """

    config: dict[str, Any]
    encoded: np.ndarray
    acquisition_value: float = math.nan


def told_seconds(seconds: Iterable[float | None]) -> np.ndarray:
    """Evaluation seconds as floats, NaN where None (not known); refused,
    naming the first bad one, unless each is finite and >= 0 or not known."""
    seconds = np.array(
        [math.nan if took is None else took for took in seconds], dtype=float
    )
    bad = (seconds < 0) | np.isinf(seconds)
    if bad.any():
        raise ValueError(
            "told seconds must be finite and >= 0, or None, got "
            f"{float(seconds[bad][0])!r}"
        )
    return seconds


class GridExhaustedError(ValueError):
    """Every configuration of the grid has been asked."""


class Optimizer:
    """The ask/tell protocol and the history of told points.

    Failed evaluations are told with value None: they stay in the history (as
    NaN) but no model learns from them. Each point may be told with the seconds
    its evaluation took (a cost-aware acquisition models them); NaN where not.
    """

    def __init__(self, space: SearchSpace, seed: int = 0):
        self.space = space
        self.seed = seed
        self._rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0])
        self._X: list[np.ndarray] = []
        self._values: list[float] = []
        self._seconds: list[float] = []
        self._n_preloaded = 0

    @property
    def X(self) -> np.ndarray:
        """Told points, shape (t, dim)."""
        return np.array(self._X).reshape(len(self._X), self.space.dim)

    @property
    def values(self) -> np.ndarray:
        """Told values, shape (t,); NaN marks a failed evaluation."""
        return np.array(self._values, dtype=float)

    @property
    def seconds(self) -> np.ndarray:
        """Told evaluation seconds, shape (t,); NaN where none was told."""
        return np.array(self._seconds, dtype=float)

    @property
    def weighs_seconds(self) -> bool:
        """Whether its proposals follow measured seconds (which the same seed
        does not repeat), not only the told values."""
        return False

    def ask(self, pending: Sequence[np.ndarray] = ()) -> Suggestion:
        return self.ask_batch(1, pending)[0]

    def ask_batch(
        self, size: int, pending: Sequence[np.ndarray] = ()
    ) -> list[Suggestion]:
        """`size` configurations to evaluate at once (e.g. in parallel).

        pending: encoded points (each (dim,)) asked earlier and still being
        evaluated; a model-based optimizer treats them as fantasies, as it does
        the batch's own points, so that it does not propose them again.
        """
        if int(size) != size or size < 1:
            raise ValueError(f"batch size must be a positive integer, got {size!r}")
        return self._propose(int(size), [np.asarray(p, dtype=float) for p in pending])

    def _propose(self, size: int, pending: list[np.ndarray]) -> list[Suggestion]:
        raise NotImplementedError

    def _suggest(
        self, point: np.ndarray, acquisition_value: float = math.nan
    ) -> Suggestion:
        config = self.space.decode(np.clip(np.asarray(point, dtype=float), 0.0, 1.0))
        return Suggestion(config, self.space.encode(config), acquisition_value)

    def tell(
        self,
        suggestion: Suggestion,
        value: float | None,
        seconds: float | None = None,
    ) -> None:
        """Record the loss of an asked suggestion (None if its evaluation failed)
        and the seconds its evaluation took (None or NaN: not known; a failed
        one's too: a trial cut at a time limit took at least that long)."""
        if value is not None and not math.isfinite(value):
            raise ValueError(f"told value must be finite or None, got {value!r}")
        (took,) = told_seconds([seconds])
        self._X.append(np.asarray(suggestion.encoded, dtype=float))
        self._values.append(math.nan if value is None else float(value))
        self._seconds.append(float(took))

    def tell_many(
        self,
        configs: Sequence[Mapping[str, Any]],
        values: Iterable[float | None],
        seconds: Iterable[float | None] | None = None,
    ) -> None:
        """Pre-load observations, e.g. an earlier run's trials (warm start),
        with the seconds each took where known."""
        values = list(values)
        seconds = [None] * len(values) if seconds is None else list(seconds)
        if not len(configs) == len(values) == len(seconds):
            raise ValueError(
                f"got {len(configs)} configurations but {len(values)} values "
                f"and {len(seconds)} seconds"
            )
        for config, value, took in zip(configs, values, seconds, strict=True):
            self.tell(Suggestion(dict(config), self.space.encode(config)), value, took)
        self._n_preloaded += len(configs)

    def skip_proposed(self, configs: Sequence[Mapping[str, Any]]) -> None:
        """Move past what this optimizer's earlier run (same seed) proposed and
        a resumed search now takes back as `configs`, so that it does not
        propose them again. Model-based proposals need nothing: they are told
        those points. Seeded sequences (a design, random draws) do.
        """

    def told_only(
        self, X: np.ndarray, values: np.ndarray, seconds: np.ndarray | None = None
    ) -> Optimizer:
        """A copy of this optimizer told only these points, (t, dim) encoded,
        their values, (t,) (NaN: failed), and the seconds each took, (t,) (NaN
        or None: not known), proposing from them from its first ask, past any
        initial design: BOHB's model of one budget (Falkner et al. 2018). Its
        random stream is a new child of this one's, so that successive copies
        do not repeat each other's draws; this optimizer is otherwise unchanged.
        """
        values = np.asarray(values, dtype=float)
        seconds = told_seconds([None] * len(values) if seconds is None else seconds)
        if np.shape(X) != (len(values), self.space.dim) or seconds.shape != (
            len(values),
        ):
            raise ValueError(
                f"told_only needs (t, {self.space.dim}) points and (t,) seconds for "
                f"{len(values)} values, got arrays of shape {np.shape(X)} and "
                f"{seconds.shape}"
            )
        stream = self._rng.spawn(1)[0]
        copied = copy.deepcopy(self)
        copied._rng = stream
        copied._X = [np.asarray(x, dtype=float) for x in X]
        copied._values = list(values)
        copied._seconds = list(seconds)
        copied._n_preloaded = len(values)
        return copied

    def retarget(self, values: np.ndarray) -> None:
        """Replace every told value at once, shape (t,), NaN for failed trials.

        Ensemble strategies need this: the objective f(gamma | E) of the models
        already evaluated changes whenever the ensemble E changes.
        """
        values = np.asarray(values, dtype=float)
        if values.shape != (len(self._X),):
            raise ValueError(
                f"retarget needs {len(self._X)} values, got an array of shape {values.shape}"
            )
        self._values = list(values)


# Draws past the recorded trials' count that RandomSearch.skip_proposed makes
# to find them in its sequence before giving up (trials it never drew).
SKIP_DRAWS_BEYOND = 1000


def taken_back_first(
    configs: Sequence[Mapping[str, Any]], taken_back: Sequence[Mapping[str, Any]]
) -> tuple[list[int], int]:
    """The order that puts `configs` also in `taken_back` first (each taken-back
    configuration matches one of them: a discrete space repeats configurations),
    and how many they are."""
    unmatched = [dict(config) for config in taken_back]
    first, rest = [], []
    for index, config in enumerate(configs):
        if config in unmatched:
            unmatched.remove(config)
            first.append(index)
        else:
            rest.append(index)
    return first + rest, len(first)


class RandomSearch(Optimizer):
    """Configurations drawn uniformly from the encoded cube (log scales uniform in log)."""

    def _propose(self, size: int, pending: list[np.ndarray]) -> list[Suggestion]:
        return [self._suggest(self._rng.random(self.space.dim)) for _ in range(size)]

    def skip_proposed(self, configs: Sequence[Mapping[str, Any]]) -> None:
        # Draw again until every recorded configuration has come up.
        unmatched = [dict(config) for config in configs]
        for _ in range(len(unmatched) + SKIP_DRAWS_BEYOND):
            if not unmatched:
                return
            config = self._suggest(self._rng.random(self.space.dim)).config
            if config in unmatched:
                unmatched.remove(config)


class GridSearch(Optimizer):
    """Every combination of `points_per_dimension` values per parameter, in a seeded order.

    The order is shuffled so that a budget smaller than the grid still spreads
    over the whole space instead of sweeping one corner.
    """

    def __init__(
        self, space: SearchSpace, seed: int = 0, points_per_dimension: int = 5
    ):
        super().__init__(space, seed)
        grid = space.grid(points_per_dimension)
        self._grid = [grid[i] for i in self._rng.permutation(len(grid))]
        self._next = 0

    def _propose(self, size: int, pending: list[np.ndarray]) -> list[Suggestion]:
        if self._next + size > len(self._grid):
            raise GridExhaustedError(
                f"the grid has {len(self._grid)} configurations and {self._next} were "
                f"already asked; {size} more cannot be given"
            )
        configs = self._grid[self._next : self._next + size]
        self._next += size
        return [Suggestion(config, self.space.encode(config)) for config in configs]

    def skip_proposed(self, configs: Sequence[Mapping[str, Any]]) -> None:
        # Every grid configuration not yet trained stays, in its order.
        remaining = self._grid[self._next :]
        order, taken = taken_back_first(remaining, configs)
        self._grid = self._grid[: self._next] + [remaining[i] for i in order]
        self._next += taken


HYPERPARAMETER_MODES = ("ml2", "map", "slice")
ACQUISITIONS = ("ei", "ei_per_second", "ucb")
# Trial seconds below this are modelled as this (log 0 is -inf): a trial that
# failed at once costs about as much as a worker's round trip.
MIN_MODELLED_SECONDS = 0.01
# The proposals whose mean seconds a trial's cost adds (the most recent: a GP's
# proposal grows slower with the points it was told).
PROPOSAL_SECONDS_WINDOW = 10


@dataclass
class ProposalLog:
    """The seconds per suggestion of a GP-EI optimizer's model proposals, and
    whether any of them weighed trial seconds; shared with the optimizer's
    `told_only` copies, through which BOHB makes every model proposal."""

    seconds: list[float] = field(default_factory=list)
    weighed_seconds: bool = False


class TrialCost(NamedTuple):
    """What a trial at a point is predicted to cost a search, in seconds:
    exp of `log_seconds`' posterior mean (a GP of the log seconds trials took)
    plus `overhead`, the seconds a proposal itself takes.

    The overhead keeps a configuration whose trial costs less than the
    proposal that asks for it from looking free: on a 392-row table a
    decision tree trained its folds in 0.02 s while a GP proposal after 100
    trials took 0.09 s; without it, EI per second preferred such trees 25 to 1
    to a 0.5 s forest instead of 5 to 1.
    """

    log_seconds: GaussianProcess
    overhead: float

    def log_cost(self, X: np.ndarray) -> np.ndarray:
        """log predicted seconds at X (m, dim), shape (m,)."""
        mean, _ = self.log_seconds.predict(X)
        return np.logaddexp(mean, math.log(self.overhead)) if self.overhead else mean

    def log_cost_and_gradient(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """log predicted seconds at X (m, dim), (m,), and its gradient, (m, dim)."""
        mean, _, d_mean, _ = self.log_seconds.predict_with_gradient(X)
        if not self.overhead:
            return mean, d_mean
        log_cost = np.logaddexp(mean, math.log(self.overhead))
        # d/dx log(e^mean + o) = d mean * e^mean / (e^mean + o)
        return log_cost, d_mean * np.exp(mean - log_cost)[:, None]


BATCH_STRATEGIES = ("kriging_believer", "constant_liar")


def failed_as_worst(values: np.ndarray) -> np.ndarray:
    """Told values, shape (t,), each failed one (NaN) replaced by the worst
    (largest) finite one; at least one must be finite.

    SMAC and auto-sklearn count a crashed or timed-out run at the worst cost.
    Left out of the surrogate, a failed trial leaves its region looking as
    good as its neighbours, and the optimizer proposes near it again: on a
    table of a few thousand rows, a linear and then an RBF SVM with
    C = 10^5 each ran until cut, to the end of a search's budget.
    """
    values = np.asarray(values, dtype=float)
    valid = np.isfinite(values)
    return np.where(valid, values, values[valid].max())


class ModelBasedOptimizer(Optimizer):
    """An initial design of `n_initial` points, then a surrogate's proposals.

    The design is `initial_configs` first, in their order (a portfolio of
    configurations known to do well: core.portfolio), then a scrambled Sobol
    design for the rest; configurations beyond `n_initial` are not used.
    Pre-loaded observations stand in for part of the design. Subclasses give
    `_propose_by_model(X, y, size, pending)` on every told point, a failed
    one at the worst loss told (`failed_as_worst`).
    """

    def __init__(
        self,
        space: SearchSpace,
        seed: int = 0,
        n_initial: int = 10,
        initial_configs: Sequence[Mapping[str, Any]] = (),
    ):
        super().__init__(space, seed)
        if int(n_initial) != n_initial or n_initial < 1:
            raise ValueError(f"n_initial must be an integer >= 1, got {n_initial!r}")
        self.n_initial = int(n_initial)
        chosen = [
            initial_suggestion(space, config, index)
            for index, config in enumerate(initial_configs)
        ][: self.n_initial]
        sobol = qmc.Sobol(
            space.dim, scramble=True, rng=np.random.default_rng(self._design_seed)
        )
        points = sobol.random_base2(math.ceil(math.log2(n_initial)))
        # Trained configurations are the design's suggestions as they are: a
        # given configuration is not re-decoded (its floats stay as written).
        self._initial_design = chosen + [
            self._suggest(point) for point in points[: self.n_initial - len(chosen)]
        ]
        self._initial_asked = 0

    @property
    def _design_seed(self) -> np.random.SeedSequence:
        return np.random.SeedSequence(self.seed).spawn(3)[1]

    @property
    def _model_seed(self) -> int:
        return int(np.random.SeedSequence(self.seed).spawn(3)[2].generate_state(1)[0])

    def _propose(self, size: int, pending: list[np.ndarray]) -> list[Suggestion]:
        design_left = (
            len(self._initial_design) - self._n_preloaded - self._initial_asked
        )
        start, take = self._initial_asked, min(size, max(design_left, 0))
        suggestions = self._initial_design[start : start + take]
        self._initial_asked += take
        remaining = size - len(suggestions)
        if remaining == 0:
            return suggestions
        values = self.values
        valid = np.isfinite(values)
        if valid.sum() < 2:
            # Too little to fit a model (e.g. every early trial failed): keep exploring.
            return suggestions + self._random_suggestions(remaining)
        return suggestions + self._propose_by_model(
            self.X, failed_as_worst(values), remaining, pending
        )

    def _random_suggestions(self, size: int) -> list[Suggestion]:
        return [self._suggest(self._rng.random(self.space.dim)) for _ in range(size)]

    def _propose_by_model(
        self, X: np.ndarray, y: np.ndarray, size: int, pending: list[np.ndarray]
    ) -> list[Suggestion]:
        raise NotImplementedError

    def told_only(
        self, X: np.ndarray, values: np.ndarray, seconds: np.ndarray | None = None
    ) -> Optimizer:
        copied = super().told_only(X, values, seconds)
        copied._initial_asked = len(copied._initial_design)
        return copied

    def skip_proposed(self, configs: Sequence[Mapping[str, Any]]) -> None:
        # The design points not yet trained stay, those still running when the
        # search stopped included; they come in their order after the others.
        asked = self._initial_asked
        remaining = self._initial_design[asked:]
        order, taken = taken_back_first(
            [suggestion.config for suggestion in remaining], configs
        )
        self._initial_design = self._initial_design[:asked] + [
            remaining[i] for i in order
        ]
        self._initial_asked += taken


def initial_suggestion(
    space: SearchSpace, config: Mapping[str, Any], index: int
) -> Suggestion:
    """Initial configuration `index` as a suggestion, refused unless it is a
    point of `space` (every active parameter in range, constants as declared)."""
    try:
        encoded = space.encode(config)
    except (TypeError, ValueError) as error:
        raise ValueError(
            f"initial configuration {index} {dict(config)!r} is not a point of the "
            f"search space: {error}"
        ) from None
    constants = space.decode(encoded)  # the constants the configuration may omit
    return Suggestion({**constants, **config}, encoded)


class GPEIOptimizer(ModelBasedOptimizer):
    """GP-based Bayesian optimization (ESMBO s.2, Alg. 1; Snoek et al. 2012).

    The first `n_initial` suggestions are the initial design (`initial_configs`,
    then scrambled Sobol points: ModelBasedOptimizer); afterwards
    a Matern-5/2 ARD GP is fitted to the told values, its hyperparameters by
    ML-II (`hyperparameters="ml2"`), by MAP under weak priors (`"map"`) or
    slice-sampled (`"slice"`, the acquisition then averaged over the samples:
    integrated EI), and the acquisition (EI, or UCB on the loss: the lower
    confidence bound) is maximized over Sobol candidates refined by L-BFGS-B.

    `acquisition="ei_per_second"` divides EI by the seconds a configuration is
    predicted to cost (Snoek et al. 2012, s.3.2): a second GP (MAP) models the
    log seconds of the points told with theirs, and the acquisition is
    log EI - log(exp(its posterior mean) + the mean seconds of the last
    proposals: TrialCost), so that under a wall-time budget a slow region must
    promise proportionally more. Below two points told with seconds it is
    plain EI. Its proposals depend on measured times: unlike EI's, they are
    not reproducible.

    Batches of q points come from fantasies: each chosen point is added to the
    GP with the posterior mean as its value (kriging believer) or the best
    value so far (constant liar), hyperparameters kept, before the next one
    is chosen. Pending points (asked, not yet told) join as fantasies first.
    """

    def __init__(
        self,
        space: SearchSpace,
        seed: int = 0,
        n_initial: int = 10,
        hyperparameters: str = "map",
        acquisition: str = "ei",
        ucb_beta: float = 2.0,
        batch_strategy: str = "kriging_believer",
        gp_restarts: int = 3,
        n_samples: int = 10,
        n_candidates: int = 1024,
        n_local_starts: int = 5,
        initial_configs: Sequence[Mapping[str, Any]] = (),
    ):
        super().__init__(space, seed, n_initial, initial_configs)
        for name, value, allowed in (
            ("hyperparameters", hyperparameters, HYPERPARAMETER_MODES),
            ("acquisition", acquisition, ACQUISITIONS),
            ("batch_strategy", batch_strategy, BATCH_STRATEGIES),
        ):
            if value not in allowed:
                raise ValueError(f"{name}={value!r} is not one of {list(allowed)}")
        if not ucb_beta >= 0:
            raise ValueError(f"ucb_beta must be >= 0, got {ucb_beta!r}")
        self._fitted_at = -1  # told points when the GP was last fitted
        gp_seed = self._model_seed
        if hyperparameters in ("ml2", "map"):
            self._model = GaussianProcess(
                n_restarts=gp_restarts, seed=gp_seed, prior=hyperparameters == "map"
            )
        else:
            self._model = SampledGaussianProcess(n_samples=n_samples, seed=gp_seed)
        self._cost_model = GaussianProcess(
            n_restarts=gp_restarts, seed=self._cost_model_seed, prior=True
        )
        self._cost_fitted_on: tuple[np.ndarray, np.ndarray] | None = None
        self._proposals = ProposalLog()
        self.hyperparameters = hyperparameters
        self.acquisition = acquisition
        self.ucb_beta = float(ucb_beta)
        self.batch_strategy = batch_strategy
        self.n_candidates = n_candidates
        self.n_local_starts = n_local_starts

    @property
    def weighs_seconds(self) -> bool:
        return self._proposals.weighed_seconds

    def told_only(
        self, X: np.ndarray, values: np.ndarray, seconds: np.ndarray | None = None
    ) -> Optimizer:
        copied = super().told_only(X, values, seconds)
        copied._proposals = self._proposals
        return copied

    @property
    def _cost_model_seed(self) -> int:
        return int(np.random.SeedSequence(self.seed).spawn(4)[3].generate_state(1)[0])

    def _propose(self, size: int, pending: list[np.ndarray]) -> list[Suggestion]:
        # GP matrices are small: BLAS threads cost more in start-up than they save
        # (measured: up to 10x slower fits on 2 busy cores).
        with threadpool_limits(limits=1, user_api="blas"):
            return super()._propose(size, pending)

    def _posteriors(
        self, X: np.ndarray, y: np.ndarray, keep_hyperparameters: bool = False
    ) -> list[GaussianProcess]:
        """One GP posterior (ML-II, MAP) or one per hyperparameter sample (slice).

        keep_hyperparameters: when nothing was told since the last fit, condition
        on `y` with that fit's hyperparameters instead of fitting them again.
        """
        single = isinstance(self._model, GaussianProcess)
        if keep_hyperparameters and self._fitted_at == len(self._X):
            samples = [self._model.hyperparameters] if single else self._model.samples
        else:
            self._model.fit(X, y)
            self._fitted_at = len(self._X)
            if single:
                return [self._model]
            samples = self._model.samples
        return [GaussianProcess().condition(X, y, sample) for sample in samples]

    def _trial_cost(self) -> TrialCost | None:
        """The predicted cost of a trial for "ei_per_second" (its GP fitted
        again only when something was told since), or None: another
        acquisition, fewer than two points told with seconds, or a failed fit."""
        seconds = self.seconds
        known = np.isfinite(seconds)
        if self.acquisition != "ei_per_second" or known.sum() < 2:
            return None
        X = self.X[known]
        log_seconds = np.log(np.maximum(seconds[known], MIN_MODELLED_SECONDS))
        fitted_on = self._cost_fitted_on
        if fitted_on is not None and all(
            np.array_equal(now, then)
            for now, then in zip((X, log_seconds), fitted_on, strict=True)
        ):
            return self._with_overhead()
        try:
            self._cost_model.fit(X, log_seconds)
        except (ValueError, np.linalg.LinAlgError) as error:
            warnings.warn(
                f"GP fit of trial seconds failed ({error}); EI not divided "
                "by predicted seconds",
                stacklevel=6,
            )
            return None
        self._cost_fitted_on = (X, log_seconds)
        return self._with_overhead()

    def _with_overhead(self) -> TrialCost:
        recent = self._proposals.seconds[-PROPOSAL_SECONDS_WINDOW:]
        return TrialCost(self._cost_model, float(np.mean(recent)) if recent else 0.0)

    def _propose_by_model(
        self, X: np.ndarray, y: np.ndarray, size: int, pending: list[np.ndarray]
    ) -> list[Suggestion]:
        # Timed here, not in _propose: a design point's ask costs nothing.
        started = time.perf_counter()
        suggestions = self._model_proposals(X, y, size, pending)
        self._proposals.seconds.append((time.perf_counter() - started) / size)
        return suggestions

    def _model_proposals(
        self, X: np.ndarray, y: np.ndarray, size: int, pending: list[np.ndarray]
    ) -> list[Suggestion]:
        try:
            # A proposal asked while others train, with nothing told since the
            # last one (the rest of a rung's batch, core.brackets), keeps that
            # fit's hyperparameters on its own targets: one fit per batch, as a
            # batch of q asked at once has.
            posteriors = self._posteriors(X, y, keep_hyperparameters=bool(pending))
        except (ValueError, np.linalg.LinAlgError) as error:
            warnings.warn(
                f"GP fit failed ({error}); suggesting random points", stacklevel=5
            )
            return self._random_suggestions(size)
        # Trials still running have no seconds yet: the cost model ignores them.
        cost = self._trial_cost()
        if cost is not None:
            self._proposals.weighed_seconds = True
        for point in pending:
            X, y, posteriors = self._fantasize(X, y, posteriors, point)
        suggestions: list[Suggestion] = []
        while True:
            # Fantasies join y, so a believed value below the best moves the incumbent too.
            best, incumbent = float(y.min()), X[np.argmin(y)]
            acquisition, values_and_gradients = self._acquisition_function(
                posteriors, best, cost
            )
            point, value = maximize_acquisition(
                acquisition,
                self.space.dim,
                self._rng,
                self.n_candidates,
                self.n_local_starts,
                # EI often peaks next to the incumbent: refine from there too.
                extra_starts=incumbent,
                value_and_gradient=values_and_gradients,
            )
            suggestion = self._suggest(
                point, value if self.acquisition == "ucb" else math.exp(value)
            )
            suggestions.append(suggestion)
            if len(suggestions) == size:
                return suggestions
            X, y, posteriors = self._fantasize(X, y, posteriors, suggestion.encoded)

    def _acquisition_function(
        self,
        posteriors: list[GaussianProcess],
        best: float,
        cost: TrialCost | None = None,
    ) -> tuple[
        Callable[[np.ndarray], np.ndarray],
        Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]],
    ]:
        """The acquisition to maximize, candidates (m, dim) -> (m,), and the same with
        its gradient w.r.t. the candidates, -> ((m,), (m, dim)).

        log integrated EI over the posteriors, less the log of a trial's
        predicted `cost` where given (log EI per second), or minus their mean
        lower confidence bound; the gradient is chained through each
        posterior's mean and std.
        """
        space, beta = self.space, self.ucb_beta
        ucb = self.acquisition == "ucb"  # else EI, per second where a cost is given

        def acquisition_values(candidates: np.ndarray) -> np.ndarray:
            # The GP sees inactive and categorical coordinates the way told points have them.
            canonical = space.canonicalize(candidates)
            means, stds = zip(
                *(gp.predict(canonical) for gp in posteriors), strict=True
            )
            means, stds = np.array(means), np.array(stds)  # (S, m)
            if ucb:
                return -lower_confidence_bound(means, stds, beta).mean(axis=0)
            values = log_integrated_expected_improvement(means, stds, best)
            return values if cost is None else values - cost.log_cost(canonical)

        def values_and_gradients(
            candidates: np.ndarray,
        ) -> tuple[np.ndarray, np.ndarray]:
            canonical, passthrough = space.canonicalize_with_passthrough(candidates)
            predictions = [gp.predict_with_gradient(canonical) for gp in posteriors]
            # (S, m) and (S, m, dim)
            means, stds, d_means, d_stds = map(np.array, zip(*predictions, strict=True))
            if ucb:
                values = -lower_confidence_bound(means, stds, beta).mean(axis=0)
                by_mean = np.full(means.shape, -1.0 / len(posteriors))
                by_std = np.full(means.shape, beta / len(posteriors))
            else:
                values, by_mean, by_std = (
                    log_integrated_expected_improvement_and_partials(means, stds, best)
                )
            gradients = np.einsum("sm,smd->md", by_mean, d_means) + np.einsum(
                "sm,smd->md", by_std, d_stds
            )
            if cost is not None:
                log_cost, d_log_cost = cost.log_cost_and_gradient(canonical)
                values, gradients = values - log_cost, gradients - d_log_cost
            return values, np.where(passthrough, gradients, 0.0)

        return acquisition_values, values_and_gradients

    def _fantasize(
        self,
        X: np.ndarray,
        y: np.ndarray,
        posteriors: list[GaussianProcess],
        point: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, list[GaussianProcess]]:
        if self.batch_strategy == "kriging_believer":
            means = [gp.predict(point[None, :])[0][0] for gp in posteriors]
            fantasy = float(np.mean(means))
        else:
            fantasy = float(y.min())
        X, y = np.vstack([X, point]), np.append(y, fantasy)
        # Same hyperparameters *and* the same y scaling: re-standardizing with the
        # fantasy included would quietly change amplitude and noise in y's units.
        return (
            X,
            y,
            [
                GaussianProcess().condition(
                    X, y, gp.hyperparameters, y_scaling=(gp.y_mean, gp.y_std)
                )
                for gp in posteriors
            ],
        )
