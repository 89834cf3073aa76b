"""Ask/tell Bayesian optimization (GP-EI) over a SearchSpace, minimizing."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import qmc
from threadpoolctl import threadpool_limits

from ensemble_bo.core.acquisition import log_expected_improvement, maximize_acquisition
from ensemble_bo.core.space import SearchSpace
from ensemble_bo.core.surrogate import GaussianProcess


@dataclass(frozen=True)
class Suggestion:
    """A configuration to evaluate next.

    `encoded` is its point in [0, 1]^d (shape (d,)); `expected_improvement` is
    the EI that chose it, NaN while in the initial design.
    """

    config: dict[str, Any]
    encoded: np.ndarray
    expected_improvement: float = math.nan


class GPEIOptimizer:
    """GP-EI minimizer with an ask/tell interface (ESMBO s.2, Alg. 1).

    The first `n_initial` suggestions are a scrambled Sobol design; afterwards a
    Matern-5/2 ARD GP is fitted by ML-II to the told values and EI is maximized
    over Sobol candidates refined by L-BFGS-B.

    Failed evaluations are told with value None: they stay in the history but
    are kept out of the GP, since a failure says nothing about the loss surface
    of the configurations that do train.
    """

    def __init__(
        self,
        space: SearchSpace,
        seed: int = 0,
        n_initial: int = 10,
        gp_restarts: int = 3,
        n_candidates: int = 1024,
        n_local_starts: int = 5,
    ):
        if n_initial < 1:
            raise ValueError(f"n_initial must be >= 1, got {n_initial!r}")
        self.space = space
        seeds = np.random.SeedSequence(seed).spawn(3)
        sobol = qmc.Sobol(
            space.dim, scramble=True, seed=np.random.default_rng(seeds[0])
        )
        self._initial_design = sobol.random_base2(math.ceil(math.log2(n_initial)))[
            :n_initial
        ]
        self._rng = np.random.default_rng(seeds[1])
        self._gp = GaussianProcess(
            n_restarts=gp_restarts, seed=int(seeds[2].generate_state(1)[0])
        )
        self.n_candidates = n_candidates
        self.n_local_starts = n_local_starts
        self._X: list[np.ndarray] = []
        self._values: list[float] = []

    @property
    def X(self) -> np.ndarray:
        """Told points, shape (t, d)."""
        return np.array(self._X).reshape(len(self._X), self.space.dim)

    @property
    def values(self) -> np.ndarray:
        """Told values, shape (t,); NaN marks a failed evaluation."""
        return np.array(self._values, dtype=float)

    def ask(self) -> Suggestion:
        n_told = len(self._X)
        if n_told < len(self._initial_design):
            return self._suggest(self._initial_design[n_told])
        valid = np.isfinite(self.values)
        if valid.sum() < 2:
            # Too little to fit a GP (e.g. every early trial failed): keep exploring.
            return self._suggest(self._rng.random(self.space.dim))
        # GP matrices are small: BLAS threads cost more in start-up than they save
        # (measured: up to 10x slower fits on 2 busy cores).
        with threadpool_limits(limits=1, user_api="blas"):
            return self._suggest_by_expected_improvement(
                self.X[valid], self.values[valid]
            )

    def _suggest_by_expected_improvement(
        self, X: np.ndarray, y: np.ndarray
    ) -> Suggestion:
        best = float(y.min())
        try:
            self._gp.fit(X, y)
        except (ValueError, np.linalg.LinAlgError) as error:
            warnings.warn(
                f"GP fit failed ({error}); suggesting a random point", stacklevel=3
            )
            return self._suggest(self._rng.random(self.space.dim))

        def log_ei(candidates: np.ndarray) -> np.ndarray:
            mean, std = self._gp.predict(candidates)
            return log_expected_improvement(mean, std, best)

        point, value = maximize_acquisition(
            log_ei, self.space.dim, self._rng, self.n_candidates, self.n_local_starts
        )
        return self._suggest(point, math.exp(value))

    def _suggest(
        self, point: np.ndarray, expected_improvement: float = math.nan
    ) -> Suggestion:
        point = np.clip(np.asarray(point, dtype=float), 0.0, 1.0)
        return Suggestion(self.space.decode(point), point, expected_improvement)

    def tell(self, suggestion: Suggestion, value: float | None) -> None:
        """Record the loss of an asked suggestion (None if its evaluation failed)."""
        if value is not None and not math.isfinite(value):
            raise ValueError(f"told value must be finite or None, got {value!r}")
        self._X.append(np.asarray(suggestion.encoded, dtype=float))
        self._values.append(math.nan if value is None else float(value))

    def relabel(self, values: np.ndarray) -> None:
        """Replace every told value at once, shape (t,), NaN for failed trials.

        Ensemble strategies need this: the objective f(gamma | E) of the models
        already evaluated changes whenever the ensemble E changes.
        """
        values = np.asarray(values, dtype=float)
        if values.shape != (len(self._X),):
            raise ValueError(
                f"relabel needs {len(self._X)} values, got an array of shape {values.shape}"
            )
        self._values = list(values)
