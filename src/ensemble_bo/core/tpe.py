"""Optuna's TPE sampler behind our ask/tell (`optimizer.kind: tpe`).

TPE (Bergstra et al. 2011, as Optuna implements it) models the densities of
good and bad configurations instead of the loss; Optuna's implementation is
well kept and tested, so it is the engine here rather than a copy of it.

Optuna's samplers read a study's trials, while our optimizers keep a history
whose values ensemble strategies replace at every iteration (`retarget`:
SEGOR's objective f(gamma | E) changes whenever the ensemble E does). So each
ask builds a fresh in-memory study from the history as it stands: every told
point a COMPLETE trial with its current value (FAIL for a failed
evaluation), every pending point a RUNNING trial (which TPE's constant liar
treats as a bad result, so a parallel batch spreads out). TPE keeps no state
between asks but its random stream, seeded at each ask from this optimizer's
own, so the same seed and tells give the same suggestions.

Categorical parameters reach Optuna as their choice indices (TPE treats
choices as unordered, and Optuna's storage takes only primitive choices);
constants are no dimension; a conditional parameter is in a trial only where
active, so TPE models it from the trials where it applied.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.trial import TrialState

from ensemble_bo.core.optimizer import Optimizer, Suggestion
from ensemble_bo.core.space import (
    CategoricalParameter,
    ConstantParameter,
    NumericParameter,
    SearchSpace,
)


def optuna_distributions(space: SearchSpace) -> dict[str, BaseDistribution]:
    """Every searched parameter of `space` as an Optuna distribution (constants left out)."""
    distributions: dict[str, BaseDistribution] = {}
    for parameter in space.parameters:
        if isinstance(parameter, CategoricalParameter):
            distributions[parameter.name] = CategoricalDistribution(
                list(range(len(parameter.choices)))
            )
        elif isinstance(parameter, NumericParameter):
            distribution = (
                IntDistribution if parameter.kind == "int" else FloatDistribution
            )
            distributions[parameter.name] = distribution(
                parameter.low, parameter.high, log=parameter.log
            )
    return distributions


@contextlib.contextmanager
def _quiet_optuna() -> Iterator[None]:
    # create_study logs one INFO line per study; one study per ask would flood the log.
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        yield
    finally:
        optuna.logging.set_verbosity(verbosity)


class TPEOptimizer(Optimizer):
    """TPE through Optuna's TPESampler, over a SearchSpace, minimizing.

    n_initial: Optuna's `n_startup_trials`, random configurations before TPE
    models (pre-loaded observations count); n_ei_candidates, multivariate:
    TPESampler's own options, at Optuna's defaults for one objective
    (multivariate TPE models the parameters jointly; a conditional parameter
    outside the space every trial shares is sampled on its own).
    """

    def __init__(
        self,
        space: SearchSpace,
        seed: int = 0,
        n_initial: int = 10,
        n_ei_candidates: int = 24,
        multivariate: bool = True,
    ):
        super().__init__(space, seed)
        if int(n_initial) != n_initial or n_initial < 1:
            raise ValueError(f"n_initial must be an integer >= 1, got {n_initial!r}")
        if int(n_ei_candidates) != n_ei_candidates or n_ei_candidates < 1:
            raise ValueError(
                f"n_ei_candidates must be an integer >= 1, got {n_ei_candidates!r}"
            )
        if not isinstance(multivariate, bool):
            raise ValueError(
                f"multivariate must be true or false, got {multivariate!r}"
            )
        self.n_initial = int(n_initial)
        self.n_ei_candidates = int(n_ei_candidates)
        self.multivariate = multivariate
        self._distributions = optuna_distributions(space)

    def _params(self, config: dict[str, Any]) -> dict[str, Any]:
        """A configuration's searched parameters as Optuna's trial params."""
        params = {}
        for parameter in self.space.parameters:
            if parameter.name not in config or isinstance(parameter, ConstantParameter):
                continue
            value = config[parameter.name]
            if isinstance(parameter, CategoricalParameter):
                value = parameter.choices.index(value)
            params[parameter.name] = value
        return params

    def _config(self, params: dict[str, Any]) -> dict[str, Any]:
        """Optuna's sampled params (every parameter) -> a configuration of the active ones."""
        config: dict[str, Any] = {}
        for parameter in self.space.parameters:
            if not self.space.is_active(parameter, config):
                continue
            if isinstance(parameter, ConstantParameter):
                config[parameter.name] = parameter.value
            elif isinstance(parameter, CategoricalParameter):
                config[parameter.name] = parameter.choices[params[parameter.name]]
            else:
                config[parameter.name] = params[parameter.name]
        return config

    def _trial(
        self, point: np.ndarray, value: float, state: TrialState
    ) -> optuna.trial.FrozenTrial:
        params = self._params(self.space.decode(point))
        return optuna.trial.create_trial(
            params=params,
            distributions={name: self._distributions[name] for name in params},
            value=value if state == TrialState.COMPLETE else None,
            state=state,
        )

    def told_only(
        self, X: np.ndarray, values: np.ndarray, seconds: np.ndarray | None = None
    ) -> Optimizer:
        # Past TPE's random start-up: the points told are what the copy models.
        copied = super().told_only(X, values, seconds)
        copied.n_initial = 1
        return copied

    def _propose(self, size: int, pending: list[np.ndarray]) -> list[Suggestion]:
        sampler = optuna.samplers.TPESampler(
            n_startup_trials=self.n_initial,
            n_ei_candidates=self.n_ei_candidates,
            multivariate=self.multivariate,
            constant_liar=True,
            seed=int(self._rng.integers(2**31)),
        )
        with _quiet_optuna():
            study = optuna.create_study(sampler=sampler, direction="minimize")
        study.add_trials(
            [
                self._trial(point, value, TrialState.COMPLETE)
                if math.isfinite(value)
                else self._trial(point, math.nan, TrialState.FAIL)
                for point, value in zip(self._X, self._values, strict=True)
            ]
            + [self._trial(point, math.nan, TrialState.RUNNING) for point in pending]
        )
        suggestions = []
        for _ in range(size):
            # An asked trial stays RUNNING in the study: the batch's next ask sees it.
            config = self._config(study.ask(self._distributions).params)
            suggestions.append(Suggestion(config, self.space.encode(config)))
        return suggestions
