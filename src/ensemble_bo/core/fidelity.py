"""Multi-fidelity schedules: successive halving, Hyperband and BOHB's budgets.

A configuration can be evaluated cheaply on a small *resource* (1 of k CV
folds, a fraction of each training fold's rows, a few boosting iterations)
and fully at `max_resource`. The schedulers spend little on many
configurations and more on the promising ones:

- successive halving (Jamieson & Talwalkar 2016, "Non-stochastic best arm
  identification and hyperparameter optimization"): evaluate n configurations
  at `min_resource`, keep the best 1/eta of them, evaluate those at eta times
  the resource, and so on up to `max_resource`;
- Hyperband (Li et al. 2017, "Hyperband: a novel bandit-based approach to
  hyperparameter optimization", JMLR 18, Algorithm 1): successive halving
  hedged over how aggressive it is. Bracket s = s_max, ..., 0 starts
  n = ceil((s_max + 1) / (s + 1) * eta^s) random configurations at
  r = R * eta^-s; bracket s_max is the most exploratory, bracket 0 is random
  search at full fidelity;
- BOHB (Falkner et al. 2018, "BOHB: robust and efficient hyperparameter
  optimization at scale", ICML, Algorithm 2): Hyperband whose configurations
  come from a model fitted on the largest resource with enough observations,
  with a fraction rho of them still drawn at random.

This module is the arithmetic and the bookkeeping of those schedules, pure
and synchronous: the brackets (lists of `Rung`), `promote`, a `BracketRun` a
search steps through ask/tell style and the schedules that order brackets.
Configurations are indices owned by the caller, who proposes them (randomly
for successive halving and Hyperband, from its sampler for BOHB) and
evaluates them.

Ensemble promotion. In a multi-fidelity *ensemble* search (SEGOR, SEGO,
ESMBO, ERS and post-hoc selection), only full-fidelity trials enter the pool
that ensembles are selected from; low-fidelity results only decide which
configurations are promoted. The issue's rule is to rank the candidates of a
rung by the ensemble objective: the loss of the current ensemble with the
candidate in the slot being refilled, estimated on the folds (or rows, or
iterations) evaluated so far, not by the candidate's own loss. A model that
is mediocre alone but corrects the ensemble's errors is promoted over a good
model that repeats them, which is what makes the search an ensemble search.
The ensemble changes while a rung is evaluated, so a search built on that
rule runs `BracketRun` with `auto_promote=False` and hands `promote_with`
each candidate's ensemble loss computed when the rung is complete. ESMBO
ranks by each candidate's risk on the bootstrap replica of the iteration, on
the rows evaluated so far, and the single-model searches (SMBO, random
search, ERS's pool) by the candidate's own loss. This module never decides
what a loss means: it ranks by the losses it is given, lowest first, and
never promotes a failed (NaN) evaluation.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from numbers import Integral, Real

import numpy as np

SCHEDULERS = ("none", "successive_halving", "hyperband", "bohb")
RESOURCES = ("folds", "rows", "iterations")
# Resources counted in whole units: rung resources are rounded down to them.
INTEGER_RESOURCES = ("folds", "iterations")
FIDELITY_KEYS = ("scheduler", "resource", "min_resource", "max_resource", "eta")
# Li et al. 2017 suggest eta = 3 or 4; Falkner et al. 2018 use 3.
DEFAULT_ETA = 3

# BOHB's defaults (Falkner et al. 2018, Algorithm 2, shown as Algorithm 4 in
# the klein2018 slides): a fraction rho = 1/3 of the configurations is drawn
# at random, as plain Hyperband would, so the search never stops exploring ...
BOHB_RANDOM_FRACTION = 1 / 3
# ... and a model is fitted on budget b only once |D_b| >= N_min + 2 (line 3),
# with N_min = d + 1 for d hyperparameters.
BOHB_EXTRA_POINTS = 2

# Relative slack on floor / ceil / log so that floating point never moves an
# exact value across an integer (81 * 3^-4 is 1, log_3(81) is 4).
_TOLERANCE = 1e-9

Resource = int | float


@dataclass(frozen=True)
class Rung:
    """One stage of a bracket: `n_configs` configurations at `resource` each."""

    n_configs: int
    resource: Resource

    def __post_init__(self) -> None:
        if (
            isinstance(self.n_configs, bool)
            or not isinstance(self.n_configs, Integral)
            or self.n_configs < 1
        ):
            raise ValueError(
                f"a rung needs n_configs >= 1 (an integer), got {self.n_configs!r}"
            )
        if not is_positive_number(self.resource):
            raise ValueError(
                f"a rung needs a positive finite resource, got {self.resource!r}"
            )


Bracket = list[Rung]


def is_positive_number(value: object) -> bool:
    """Whether `value` is a finite real number > 0 (a bool is not)."""
    return (
        not isinstance(value, bool)
        and isinstance(value, Real)
        and math.isfinite(value)
        and value > 0
    )


def _floor(x: Fraction) -> int:
    return math.floor(x * (1 + Fraction(_TOLERANCE)))


def ceil_exact(x: Fraction) -> int:
    """ceil(x), an exact value a hair above an integer (floating point) not rounded up."""
    return math.ceil(x * (1 - Fraction(_TOLERANCE)))


def _check_scale(
    min_resource: object, max_resource: object, eta: object
) -> tuple[Fraction, Fraction, Fraction]:
    """min, max and eta as exact fractions, checked (binary floats are exact)."""
    if not is_positive_number(eta) or eta <= 1:
        raise ValueError(f"eta must be a finite number > 1, got {eta!r}")
    for name, value in (("min_resource", min_resource), ("max_resource", max_resource)):
        if not is_positive_number(value):
            raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    if min_resource > max_resource:
        raise ValueError(
            f"min_resource={min_resource!r} must be <= max_resource={max_resource!r}"
        )
    return Fraction(min_resource), Fraction(max_resource), Fraction(eta)


def max_bracket_index(
    min_resource: Resource, max_resource: Resource, eta: float
) -> int:
    """s_max = floor(log_eta(max_resource / min_resource)), exact at powers of eta.

    Counted by multiplying rather than by log(R) / log(eta), which gives
    4.999999999999999 for log(243) / log(3).
    """
    low, high, eta_ = _check_scale(min_resource, max_resource, eta)
    ratio = high / low * (1 + Fraction(_TOLERANCE))
    s = 0
    while eta_ ** (s + 1) <= ratio:
        s += 1
    return s


def _rung_resource(value: Fraction, low: Fraction, integer: bool) -> Resource:
    if integer:
        # Rounded down so that a bracket never spends more than published.
        return max(_floor(value), math.ceil(low))
    # Never below min: 0.6 / 3 is 0.19999999999999998 for min 0.2.
    return max(float(value), float(low))


def _check_increasing(rungs: Bracket, what: str) -> Bracket:
    for lower, upper in itertools.pairwise(rungs):
        if upper.resource <= lower.resource:
            raise ValueError(
                f"{what}: rounding to whole units puts two rungs at resource "
                f"{lower.resource!r}; use a larger eta or a wider resource range"
            )
    return rungs


def successive_halving_rungs(
    n_configs: int,
    min_resource: Resource,
    max_resource: Resource,
    eta: float = DEFAULT_ETA,
    *,
    integer: bool = False,
) -> Bracket:
    """Successive halving's rungs: floor(n * eta^-i) configurations at min * eta^i.

    Rungs i = 0..s_max with s_max = floor(log_eta(max / min)); the last rung is
    at `max_resource` exactly. When max / min is not a power of eta, min *
    eta^s_max falls short of max, and that last rung is moved up to max
    rather than adding a rung past it: the final promotion then multiplies the
    resource by a factor in [eta, eta^2) instead of eta, and the schedule keeps
    the s_max + 1 rungs Hyperband's most exploratory bracket has (folds 1..5
    with eta 2: 1, 2, 5 folds, not 1, 2, 4, 5). With s_max = 0 the one rung is
    at max. `integer`: resources in whole units (folds, iterations), rounded
    down, never below min.

    n_configs must leave at least one configuration at the last rung
    (n >= eta^s_max): a ValueError says the smallest n otherwise.
    """
    low, high, eta_ = _check_scale(min_resource, max_resource, eta)
    if isinstance(n_configs, bool) or not isinstance(n_configs, Integral):
        raise ValueError(f"n_configs must be an integer, got {n_configs!r}")
    s_max = max_bracket_index(min_resource, max_resource, eta)
    if _floor(n_configs / eta_**s_max) < 1:
        raise ValueError(
            f"n_configs={n_configs} leaves no configuration at max_resource="
            f"{max_resource!r}: successive halving from {min_resource!r} with "
            f"eta={eta!r} has {s_max + 1} rungs and needs n_configs >= "
            f"{ceil_exact(eta_**s_max)}"
        )
    rungs = []
    for i in range(s_max + 1):
        resource = (
            _rung_resource(high, low, integer)
            if i == s_max
            else _rung_resource(low * eta_**i, low, integer)
        )
        rungs.append(Rung(_floor(n_configs / eta_**i), resource))
    return _check_increasing(rungs, "successive halving")


def hyperband_brackets(
    min_resource: Resource,
    max_resource: Resource,
    eta: float = DEFAULT_ETA,
    *,
    integer: bool = False,
) -> list[Bracket]:
    """Hyperband's brackets, s = s_max down to 0 (Li et al. 2017, Algorithm 1).

    With R = max / min (the paper's units of r_min), s_max = floor(log_eta R);
    bracket s starts n = ceil((s_max + 1) / (s + 1) * eta^s) configurations at
    r = max * eta^-s and has rungs i = 0..s of floor(n * eta^-i) at r * eta^i.
    Resources are aligned on max_resource, as in the paper: when R is not a
    power of eta, bracket s_max starts above min_resource (rows 0.1..1 with
    eta 3: 1/9, not 0.1). `integer`: resources in whole units (folds,
    iterations), rounded down (folds 1..5, eta 2: 1.25, 2.5, 5 -> 1, 2, 5).
    """
    low, high, eta_ = _check_scale(min_resource, max_resource, eta)
    s_max = max_bracket_index(min_resource, max_resource, eta)
    brackets = []
    for s in range(s_max, -1, -1):
        n = ceil_exact(Fraction(s_max + 1, s + 1) * eta_**s)
        rungs = [
            Rung(
                _floor(n / eta_**i),
                _rung_resource(high / eta_ ** (s - i), low, integer),
            )
            for i in range(s + 1)
        ]
        brackets.append(_check_increasing(rungs, f"hyperband bracket s={s}"))
    return brackets


def total_resource(bracket: Sequence[Rung], *, reuse: bool = False) -> float:
    """The resource a bracket spends: sum of n_i * r_i, as Li et al. count it.

    `reuse`: a promoted configuration keeps its lower rung's work (the folds
    it has evaluated; iterations when the model is warm-started), so it pays
    only r_i - r_(i-1) at rung i.
    """
    spent = 0.0
    previous = 0.0
    for rung in bracket:
        spent += rung.n_configs * (rung.resource - (previous if reuse else 0.0))
        previous = rung.resource
    return spent


def full_fidelity_equivalents(
    bracket: Sequence[Rung], max_resource: Resource, *, reuse: bool = False
) -> float:
    """The bracket's resource in units of one full-fidelity evaluation.

    A budget of "at most N full-fidelity equivalents" runs brackets while
    their sum stays <= N (`BracketSchedule.brackets_within`).
    """
    if not is_positive_number(max_resource):
        raise ValueError(f"max_resource must be > 0, got {max_resource!r}")
    return total_resource(bracket, reuse=reuse) / max_resource


def promote(losses: Sequence[float] | np.ndarray, n_promoted: int) -> list[int]:
    """Indices of the `n_promoted` lowest losses, best first.

    Ties go to the lower index (a stable sort); NaN marks a failed evaluation
    and is never promoted, so fewer than `n_promoted` come back when fewer
    losses are not NaN. An infinite loss is a finished evaluation and ranks
    last.
    """
    if isinstance(n_promoted, bool) or not isinstance(n_promoted, Integral):
        raise ValueError(f"n_promoted must be an integer >= 0, got {n_promoted!r}")
    if n_promoted < 0:
        raise ValueError(f"n_promoted must be an integer >= 0, got {n_promoted!r}")
    values = np.asarray(losses, dtype=float).reshape(-1)
    finished = np.flatnonzero(~np.isnan(values))
    order = finished[np.argsort(values[finished], kind="stable")]
    return [int(i) for i in order[:n_promoted]]


class BracketRun:
    """One bracket, run synchronously: evaluate a rung, promote, go up.

    `config_indices` label the first rung's n_0 configurations (default
    0..n_0-1); the caller owns them and may bind each to a configuration when
    `next_jobs` first hands it out (BOHB proposes lazily). `next_jobs()` gives
    the (config_index, resource) pairs of the current rung not told yet;
    `tell` records a loss (None or NaN: failed). When a rung is complete its
    best n_(i+1) configurations (`promote` on the told losses) make the next
    rung, unless `auto_promote=False`: then the run waits for
    `promote_with(losses_by_config)`, the losses to rank by (an ensemble
    search's ensemble objectives, computed once the rung is complete).
    Ties go to the configuration listed first in its rung: the given order
    at the first rung, the order of promotion (better below first) above.
    Failures can leave a rung with fewer configurations than published; the
    bracket ends early when none is left.
    """

    def __init__(
        self,
        bracket: Sequence[Rung],
        config_indices: Sequence[int] | None = None,
        *,
        auto_promote: bool = True,
    ) -> None:
        bracket = list(bracket)
        if not bracket or not all(isinstance(rung, Rung) for rung in bracket):
            raise ValueError(f"a bracket is a non-empty list of Rung, got {bracket!r}")
        for lower, upper in itertools.pairwise(bracket):
            if upper.resource <= lower.resource or upper.n_configs > lower.n_configs:
                raise ValueError(
                    f"rungs must go up in resource and not up in configurations, "
                    f"got {lower} then {upper}"
                )
        first = bracket[0].n_configs
        indices = list(range(first)) if config_indices is None else list(config_indices)
        if len(indices) != first or len(set(indices)) != first:
            raise ValueError(
                f"the first rung needs {first} distinct config indices, got {indices!r}"
            )
        self.bracket = bracket
        self.auto_promote = auto_promote
        self._members: list[list[int]] = [indices]
        self._losses: list[dict[int, float]] = [{}]
        self._history: list[tuple[int, Resource, float]] = []
        self._done = False

    @property
    def rung(self) -> int:
        """The index of the rung being evaluated (the last one once done)."""
        return len(self._members) - 1

    @property
    def done(self) -> bool:
        return self._done

    @property
    def awaiting_promotion(self) -> bool:
        """The current rung is complete and waits for `promote_with`."""
        return not self._done and len(self._losses[-1]) == len(self._members[-1])

    def members(self, rung: int) -> list[int]:
        """Config indices evaluated (or to evaluate) at rung `rung`."""
        return list(self._members[rung])

    def losses(self, rung: int) -> dict[int, float]:
        """Told losses at rung `rung`, by config index (NaN: failed)."""
        return dict(self._losses[rung])

    @property
    def history(self) -> list[tuple[int, Resource, float]]:
        """Every (config_index, resource, loss) told, in order."""
        return list(self._history)

    def resources_of(self, config_index: int) -> list[Resource]:
        """The resources `config_index` was evaluated at, lowest first."""
        return [r for c, r, _ in self._history if c == config_index]

    def finished(self) -> dict[int, float]:
        """Losses at the top rung (max resource) told so far, by config index."""
        if len(self._members) < len(self.bracket):
            return {}
        return dict(self._losses[len(self.bracket) - 1])

    def next_jobs(self) -> list[tuple[int, Resource]]:
        """The current rung's (config_index, resource) not told yet (the same
        pairs until told); empty when done or awaiting promotion."""
        if self._done:
            return []
        resource = self.bracket[self.rung].resource
        told = self._losses[-1]
        return [(c, resource) for c in self._members[-1] if c not in told]

    def tell(self, config_index: int, resource: Resource, loss: float | None) -> None:
        """Record `loss` of `config_index` at `resource` (None or NaN: failed)."""
        if self._done:
            raise ValueError(
                f"the bracket is done; config {config_index} at {resource!r} is late"
            )
        expected = self.bracket[self.rung].resource
        if config_index not in self._members[-1]:
            raise ValueError(
                f"config {config_index} is not in rung {self.rung}: {self._members[-1]}"
            )
        if resource != expected:
            raise ValueError(
                f"config {config_index} was told at resource {resource!r}; rung "
                f"{self.rung} runs at {expected!r}"
            )
        if config_index in self._losses[-1]:
            raise ValueError(
                f"config {config_index} was already told at resource {resource!r}"
            )
        value = math.nan if loss is None else float(loss)
        self._losses[-1][config_index] = value
        self._history.append((config_index, resource, value))
        if len(self._losses[-1]) == len(self._members[-1]):
            if self.rung == len(self.bracket) - 1:
                self._done = True
            elif self.auto_promote:
                self._promote(self._losses[-1])

    def promote_with(
        self, losses_by_config: Mapping[int, float] | None = None
    ) -> list[int]:
        """Promote the complete current rung ranked by `losses_by_config`.

        The given losses replace the told ones for the configs they name (the
        others keep their told loss); NaN is never promoted. Returns the
        promoted config indices, best first. Only with `auto_promote=False`.
        """
        if self.auto_promote:
            raise ValueError("promote_with needs BracketRun(..., auto_promote=False)")
        if not self.awaiting_promotion:
            missing = [c for c, _ in self.next_jobs()]
            raise ValueError(
                "nothing to promote: "
                + (
                    "the bracket is done"
                    if self._done
                    else f"configs {missing} are not told"
                )
            )
        losses = dict(self._losses[-1])
        for config_index, loss in (losses_by_config or {}).items():
            if config_index not in losses:
                raise ValueError(
                    f"config {config_index} is not in rung {self.rung}: "
                    f"{self._members[-1]}"
                )
            losses[config_index] = math.nan if loss is None else float(loss)
        return self._promote(losses)

    def _promote(self, losses: Mapping[int, float]) -> list[int]:
        members = self._members[-1]
        n_next = self.bracket[self.rung + 1].n_configs
        promoted = [members[i] for i in promote([losses[c] for c in members], n_next)]
        if promoted:
            self._members.append(promoted)
            self._losses.append({})
        else:
            self._done = True  # every evaluation of the rung failed
        return promoted


class BracketSchedule:
    """Brackets run one after another, starting over after the last.

    `bracket(k)` is the k-th bracket run (k = 0, 1, ...); iterating yields
    them without end, so the caller stops when its budget is spent.
    """

    def __init__(self, brackets: Sequence[Sequence[Rung]]) -> None:
        if not brackets:
            raise ValueError("a schedule needs at least one bracket")
        self.brackets: list[Bracket] = [list(b) for b in brackets]
        self.max_resource = max(b[-1].resource for b in self.brackets)

    def __len__(self) -> int:
        return len(self.brackets)

    def bracket(self, k: int) -> Bracket:
        return list(self.brackets[k % len(self.brackets)])

    def __iter__(self) -> Iterator[Bracket]:
        return (list(b) for b in itertools.cycle(self.brackets))

    def brackets_within(
        self, full_fidelity_budget: float, *, reuse: bool = False
    ) -> list[Bracket]:
        """The brackets run, in order, while their full-fidelity equivalents
        sum to at most `full_fidelity_budget`; a bracket that would pass it is
        not started (its low rungs alone add nothing to a full-fidelity pool).
        """
        if not is_positive_number(full_fidelity_budget):
            raise ValueError(
                "full_fidelity_budget must be a finite number > 0, got "
                f"{full_fidelity_budget!r}"
            )
        chosen: list[Bracket] = []
        spent = 0.0
        for bracket in self:
            cost = full_fidelity_equivalents(bracket, self.max_resource, reuse=reuse)
            if spent + cost > full_fidelity_budget * (1 + _TOLERANCE):
                return chosen
            chosen.append(bracket)
            spent += cost
        raise AssertionError("unreachable: a schedule cycles without end")


class HyperbandSchedule(BracketSchedule):
    """Hyperband's brackets in the published order, s_max down to 0, cycling."""

    def __init__(
        self,
        min_resource: Resource,
        max_resource: Resource,
        eta: float = DEFAULT_ETA,
        *,
        integer: bool = False,
    ) -> None:
        super().__init__(
            hyperband_brackets(min_resource, max_resource, eta, integer=integer)
        )
        self.s_max = len(self.brackets) - 1

    def s(self, k: int) -> int:
        """The bracket index s of the k-th bracket run."""
        return self.s_max - k % len(self.brackets)


def bohb_model_budget(
    observations_by_resource: Mapping[Resource, int | Sequence[float]],
    dim: int,
    min_points: int | None = None,
) -> Resource | None:
    """The largest resource with enough observations for BOHB's model, or None.

    Falkner et al. 2018, Algorithm 2, line 3: b = argmax{b : |D_b| >= N_min +
    2} with N_min = dim + 1 (`min_points` overrides N_min); None means propose
    at random. Each value is a count or the losses observed at that resource;
    NaN losses (failed evaluations) are not counted, as no model learns from
    them.
    """
    if isinstance(dim, bool) or not isinstance(dim, Integral) or dim < 1:
        raise ValueError(f"dim must be an integer >= 1, got {dim!r}")
    n_min = dim + 1 if min_points is None else min_points
    if isinstance(n_min, bool) or not isinstance(n_min, Integral) or n_min < 1:
        raise ValueError(f"min_points must be an integer >= 1, got {min_points!r}")
    enough = []
    for resource, observed in observations_by_resource.items():
        if isinstance(observed, Integral) and not isinstance(observed, bool):
            count = int(observed)
        else:
            count = int(np.count_nonzero(~np.isnan(np.asarray(observed, dtype=float))))
        if count >= n_min + BOHB_EXTRA_POINTS:
            enough.append(resource)
    return max(enough) if enough else None
