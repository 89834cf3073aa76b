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

Ensemble promotion. In a multi-fidelity *ensemble* search (SEGOR/SEGO),
only full-fidelity trials enter the pool that ensembles are selected from;
low-fidelity results only decide which configurations are promoted. The
issue's rule is to rank the candidates of a rung by the ensemble objective:
the loss of the current ensemble with the candidate in the slot being
refilled, estimated on the folds (or rows, or iterations) evaluated so far,
not by the candidate's own loss. A model that is mediocre alone but corrects
the ensemble's errors is promoted over a good model that repeats them, which
is what makes the search an ensemble search. The ensemble changes while a
rung is evaluated, so a search built on that rule runs `BracketRun` with
`auto_promote=False` and hands `promote_with` each candidate's ensemble loss
computed when the rung is complete. This module never decides what a loss
means: it ranks by the losses it is given, lowest first, and never promotes a
failed (NaN) evaluation.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from numbers import Integral, Real

# Li et al. 2017 suggest eta = 3 or 4; Falkner et al. 2018 use 3.
DEFAULT_ETA = 3

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
        if not _is_positive_number(self.resource):
            raise ValueError(
                f"a rung needs a positive finite resource, got {self.resource!r}"
            )


Bracket = list[Rung]


def _is_positive_number(value: object) -> bool:
    return (
        not isinstance(value, bool)
        and isinstance(value, Real)
        and math.isfinite(value)
        and value > 0
    )


def _floor(x: Fraction) -> int:
    return math.floor(x * (1 + Fraction(_TOLERANCE)))


def _ceil(x: Fraction) -> int:
    return math.ceil(x * (1 - Fraction(_TOLERANCE)))


def _check_scale(
    min_resource: object, max_resource: object, eta: object
) -> tuple[Fraction, Fraction, Fraction]:
    """min, max and eta as exact fractions, checked (binary floats are exact)."""
    if not _is_positive_number(eta) or eta <= 1:
        raise ValueError(f"eta must be a finite number > 1, got {eta!r}")
    for name, value in (("min_resource", min_resource), ("max_resource", max_resource)):
        if not _is_positive_number(value):
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
            f"{_ceil(eta_**s_max)}"
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
        n = _ceil(Fraction(s_max + 1, s + 1) * eta_**s)
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
    if not _is_positive_number(max_resource):
        raise ValueError(f"max_resource must be > 0, got {max_resource!r}")
    return total_resource(bracket, reuse=reuse) / max_resource
