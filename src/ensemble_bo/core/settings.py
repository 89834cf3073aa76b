"""Typed settings: the parameters a method reads, parsed once.

Every parameter block of conf/base that a method reads (its own block such as
`segor`, and `ensemble`, `posthoc`) is a frozen dataclass, a `Block`, declared
beside what reads it (the strategy modules of core.strategies, the selection
stages) from the fields and checks here (`setting`, `count`, `one_of`, ...).
`Block.parse` checks its keys (a key the block does not have, a typo, is
refused naming the known keys; a missing one names the parameters file) and
each value by the check its field declares, for `kedro run --params` and the
Python API alike; the core then reads attributes, not dictionary keys. The
method registry names each method's blocks and checks the top-level names
(core.methods.check_parameter_names). Here too: the search block's common
fields (`SearchSettings`), the `fidelity` and `parallel` blocks, and
`MethodSettings`, all of a method's settings.

What needs more than one block to check (a search's `model` against the data's
task and `models`, its `optimizer` against that model's space, its `fidelity`
against the number of folds) is core.validation.check_settings'.

Pure: no Kedro, no MLflow, no files.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from fractions import Fraction
from numbers import Integral, Real
from typing import Any, ClassVar

from ensemble_bo.core.fidelity import (
    DEFAULT_ETA,
    FIDELITY_KEYS,
    INTEGER_RESOURCES,
    RESOURCES,
    SCHEDULERS,
    BracketSchedule,
    HyperbandSchedule,
    Resource,
    ceil_exact,
    is_positive_number,
    max_bracket_index,
    successive_halving_rungs,
)
from ensemble_bo.core.losses import objective
from ensemble_bo.core.time_budget import is_seconds

BACKENDS = ("local", "dask")
MODES = ("sync", "async")


class InvalidInput(ValueError):
    """A parameter or a dataset that a run cannot use; the message says which and why."""


# A field's check: (its path, e.g. "sego.loss", its value, the tasks a loss
# must apply to: the method's, or the data's once it is known).
Check = Callable[[str, Any, tuple[str, ...]], None]


def did_you_mean(names: Iterable[Any], known: Iterable[str]) -> str:
    """ " (did you mean 'variant'?)" for the known names close to `names` (difflib's
    ratio, as Python's own suggestions); "" when none is close."""
    known = list(known)
    matches: list[str] = []
    for name in names:
        for match in difflib.get_close_matches(str(name), known, n=2):
            if match not in matches:
                matches.append(match)
    return f" (did you mean {' or '.join(map(repr, matches))}?)" if matches else ""


def setting(check: Check) -> Any:
    """A block's field, checked by `check` when the block is parsed."""
    return field(metadata={"check": check})


def _is_int(value: Any) -> bool:
    return isinstance(value, Integral) and not isinstance(value, bool)


def check_count(
    value: Any, path: str, minimum: int, meaning: str, example: int | None = None
) -> int:
    """`value` as an int >= minimum, or InvalidInput naming `path` and its meaning."""
    if not _is_int(value) or value < minimum:
        example = max(minimum, 5) if example is None else example
        raise InvalidInput(
            f"{path}={value!r} is not an integer >= {minimum} ({meaning}); give e.g. "
            f"--params {path}={example}"
        )
    return int(value)


def count(minimum: int, meaning: str) -> Check:
    def check(path: str, value: Any, tasks: tuple[str, ...]) -> None:
        check_count(value, path, minimum, meaning)

    return check


def one_of(allowed: Iterable[str]) -> Check:
    allowed = tuple(allowed)

    def check(path: str, value: Any, tasks: tuple[str, ...]) -> None:
        if value not in allowed:
            raise InvalidInput(f"{path}={value!r} is not one of {list(allowed)}")

    return check


def text(meaning: str) -> Check:
    def check(path: str, value: Any, tasks: tuple[str, ...]) -> None:
        if not isinstance(value, str) or not value:
            raise InvalidInput(f"{path}={value!r} is not a text ({meaning})")

    return check


def mapping(meaning: str, nullable: bool = False) -> Check:
    def check(path: str, value: Any, tasks: tuple[str, ...]) -> None:
        if nullable and value is None:
            return
        if not isinstance(value, Mapping):
            raise InvalidInput(f"{path} must be a mapping ({meaning}), got {value!r}")

    return check


def check_time_limit(path: str, value: Any, tasks: tuple[str, ...]) -> None:
    if value is not None and not is_seconds(value):
        raise InvalidInput(
            f"{path}={value!r} is not a positive number of seconds or null (the "
            "time one configuration's k-fold evaluation may take)"
        )


def check_loss(path: str, value: Any, tasks: tuple[str, ...]) -> None:
    """A loss that applies to one of `tasks` (to the data's task once it is known)."""
    problems = []
    for task in tasks:
        try:
            objective(task, value)
        except ValueError as error:
            problems.append(str(error))
    if len(problems) == len(tasks):
        raise InvalidInput(f"{path}={value!r}: {'; '.join(problems)}")


@dataclass(frozen=True)
class Block:
    """A parameter block, its keys its fields (each checked by its `setting`)."""

    # Where the block is declared, for messages (conf/base/parameters_<file>.yml).
    file: ClassVar[str] = ""

    @classmethod
    def parse(cls, name: str, block: Any, tasks: tuple[str, ...] = ()) -> Block:
        """The block `name` of the parameters, checked: InvalidInput names an
        unknown key (with the known ones), a missing key, or a bad value."""
        where = f"conf/base/parameters_{cls.file or name}.yml"
        if not isinstance(block, Mapping):
            raise InvalidInput(
                f"{name} must be a mapping of parameters ({where}), got {block!r}"
            )
        known = [each.name for each in fields(cls)]
        unknown = sorted(str(key) for key in block if key not in known)
        if unknown:
            raise InvalidInput(
                f"{name} has no parameter {' or '.join(map(repr, unknown))}"
                f"{did_you_mean(unknown, known)}; its parameters are {known} ({where})"
            )
        missing = [key for key in known if key not in block]
        if missing:
            raise InvalidInput(f"{name} lacks the parameters {missing}; see {where}")
        for each in fields(cls):
            each.metadata["check"](f"{name}.{each.name}", block[each.name], tasks)
        return cls(**{key: block[key] for key in known})


@dataclass(frozen=True)
class SearchSettings(Block):
    """What every search method's own block holds: its display name, the model
    whose hyperparameters it searches (a name of `models`, or auto for the
    task's `default_models` entry), its optimizer's options (core.optimizer_kinds),
    the seconds one configuration's evaluation may take, and its multi-fidelity
    schedule (core.fidelity)."""

    display_name: str = setting(text("the method's name in titles"))
    model: str = setting(text("a model of `models`, or auto"))
    optimizer: Mapping[str, Any] = setting(
        mapping("the optimizer's options, e.g. {kind: gp, n_initial: 10}")
    )
    time_limit: float | None = setting(check_time_limit)
    fidelity: Mapping[str, Any] | None = setting(
        mapping("scheduler, resource, min_resource, max_resource, eta", True)
    )


def check_time_share(path: str, value: Any, tasks: tuple[str, ...]) -> None:
    if isinstance(value, bool) or not isinstance(value, Real) or not 0 < value < 1:
        raise InvalidInput(
            f"{path}={value!r} is not a share in (0, 1) (of a time budget, kept "
            f"for re-validation); give e.g. --params {path}=0.15"
        )


@dataclass(frozen=True)
class RevalidationSettings(Block):
    """`revalidation` (core.revalidation): how many fresh k-fold splits, for
    how many of the best configurations, and the share of a time budget the
    search leaves them."""

    repeats: int = setting(count(0, "fresh k-fold splits; 0: no re-validation"))
    candidates: int = setting(count(1, "the best configurations re-validated"))
    time_share: float = setting(check_time_share)

    @property
    def active(self) -> bool:
        return self.repeats > 0


# The top-level parameters every method reads beside its blocks (MethodSettings).
SHARED_PARAMS = (
    "models",
    "default_models",
    "portfolios",
    "large_data_portfolios",
    "budget",
    "time_budget",
    "max_trial_share",
    "max_initial_failures",
    "max_search_rows",
    "parallel",
    "inference",
    "revalidation",
)


@dataclass(frozen=True)
class MethodSettings:
    """Everything a method reads, parsed (core.validation.check_settings): its
    blocks by name, and what every method reads beside them.

    budget: configurations trained (with a fidelity schedule, full-fidelity
    equivalents); time_budget: seconds or None; max_trial_share: the share of
    time_budget one trial may take, "auto" (core.time_budget.effective_trial_share)
    or None: no cap; max_initial_failures: failed
    first trials that stop the search, None: never; parallel: where the trials
    train; models: the models by name; default_models: the model each
    task's `auto` takes; portfolios: the configurations a search of a model
    may evaluate first (core.portfolio), by model; large_data_portfolios:
    those it evaluates before them when it is given a sample of the data
    (core.preparation.search_input); inference: the limits on
    the ensemble's prediction time and size (core.inference_budget), as
    InferenceBudget's arguments. (max_search_rows, also checked with them,
    makes the data the search is given: core.preparation.search_input.)
    """

    blocks: Mapping[str, Block]
    budget: float
    time_budget: float | None
    max_trial_share: float | str | None
    max_initial_failures: int | None
    parallel: Any  # core.runners.ParallelSettings
    models: Mapping[str, Mapping[str, Any]]
    default_models: Mapping[str, str]
    portfolios: Mapping[str, Sequence[Mapping[str, Any]]]
    large_data_portfolios: Mapping[str, Sequence[Mapping[str, Any]]]
    inference: Mapping[str, float | None]
    revalidation: RevalidationSettings


# --- the `fidelity` block of a search (core.fidelity) ----------------------------


def _choice(block: Mapping[str, Any], key: str, default: str, allowed: tuple) -> str:
    value = block.get(key, default)
    if value not in allowed:
        raise ValueError(f"fidelity.{key}={value!r} is not one of {list(allowed)}")
    return value


def _resource_range(
    block: Mapping[str, Any],
    resource: str,
    n_folds: int | None,
    iteration_setting: tuple[str, int] | None,
) -> tuple[Resource, Resource]:
    """The block's (min_resource, max_resource) with their defaults, checked."""
    low = block.get("min_resource", 1 if resource == "folds" else None)
    high = block.get("max_resource")
    if resource == "folds" and n_folds is not None:
        if high is None:
            high = n_folds
        elif high != n_folds:
            raise ValueError(
                f"fidelity.max_resource={high!r} folds, but the CV has "
                f"{n_folds}: the pool needs every fold's predictions"
            )
    elif resource == "iterations" and iteration_setting is not None:
        name, full = iteration_setting
        if high is None:
            high = full
        elif high != full:
            raise ValueError(
                f"fidelity.max_resource={high!r} iterations, but the model's "
                f"{name} is {full}: the pool's models are the space's, so set "
                f"{name} there (or leave max_resource null)"
            )
    elif resource == "rows":
        if high is None:
            high = 1.0
        elif high != 1:
            raise ValueError(
                f"fidelity.max_resource={high!r} of the rows, but full fidelity is "
                "every row (1.0): the pool's models are refit on all of them"
            )
    low = _resource_value("min_resource", low, resource)
    high = _resource_value("max_resource", high, resource)
    if low > high:
        raise ValueError(
            f"fidelity.min_resource={low!r} must be <= max_resource={high!r}"
        )
    return low, high


def _resource_value(name: str, value: object, resource: str) -> Resource:
    if value is None:
        number_of_folds = " when the number of CV folds is not given"
        raise ValueError(
            f"fidelity.{name} is needed for resource {resource}"
            + (number_of_folds if resource == "folds" else "")
        )
    if resource not in INTEGER_RESOURCES:
        if not is_positive_number(value) or value > 1:
            raise ValueError(
                f"fidelity.{name} must be a fraction of rows in (0, 1], got {value!r}"
            )
        return value
    if not is_positive_number(value) or value != int(value) or value < 1:
        raise ValueError(
            f"fidelity.{name} must be a whole number of {resource} >= 1, got {value!r}"
        )
    return int(value)


@dataclass(frozen=True)
class FidelitySettings:
    """The `fidelity` block: which scheduler, on which resource, how fast.

    scheduler: none | successive_halving | hyperband | bohb; resource: folds
    (1..k folds of the same CV) | rows (a fraction of each training fold) |
    iterations (n_estimators / max_iter); min_resource, max_resource: the
    cheapest and the full evaluation; eta: the promotion factor (keep the
    best 1/eta of a rung).
    """

    scheduler: str = "none"
    resource: str = "folds"
    min_resource: Resource | None = None
    max_resource: Resource | None = None
    eta: float = DEFAULT_ETA
    # iterations: the configuration's setting a rung sets to its resource
    # (n_estimators, max_iter), which max_resource is the space's value of.
    iteration_setting: str | None = None

    @classmethod
    def from_block(
        cls,
        block: Mapping[str, Any] | None,
        n_folds: int | None = None,
        iteration_setting: tuple[str, int] | None = None,
    ) -> FidelitySettings:
        """The settings of a `fidelity` block, checked; None: no scheduler.

        max_resource defaults to `n_folds` for folds (and must equal it: the
        pool needs every fold's out-of-fold predictions), to 1.0 for rows, and
        for iterations to the count of `iteration_setting`, (name, count): the
        model's constant n_estimators or max_iter, which it must equal.
        min_resource defaults to 1 for folds. With scheduler none the other
        values are not checked.
        """
        if block is None:
            return cls()
        if not isinstance(block, Mapping):
            raise ValueError(f"fidelity must be a mapping, got {block!r}")
        unknown = sorted(set(block) - set(FIDELITY_KEYS))
        if unknown:
            raise ValueError(
                f"fidelity has unknown keys {unknown}"
                f"{did_you_mean(unknown, FIDELITY_KEYS)}; known: "
                f"{', '.join(FIDELITY_KEYS)}"
            )
        scheduler = _choice(block, "scheduler", "none", SCHEDULERS)
        if scheduler == "none":
            return cls()
        resource = _choice(block, "resource", "folds", RESOURCES)
        eta = block.get("eta", DEFAULT_ETA)
        if not is_positive_number(eta) or eta <= 1:
            raise ValueError(f"fidelity.eta must be a finite number > 1, got {eta!r}")
        low, high = _resource_range(block, resource, n_folds, iteration_setting)
        if max_bracket_index(low, high, eta) == 0:
            raise ValueError(
                f"fidelity.min_resource={low!r} leaves no rung below max_resource="
                f"{high!r} at eta={eta!r}: every configuration would be evaluated in "
                "full, with no early stopping; give a smaller min_resource (e.g. "
                + ("0.111 of the rows" if resource == "rows" else "1")
                + ") or scheduler: none"
            )
        setting = (
            iteration_setting[0]
            if resource == "iterations" and iteration_setting is not None
            else None
        )
        settings = cls(scheduler, resource, low, high, eta, setting)
        settings.schedule()  # whole units can put two rungs at one resource
        return settings

    @property
    def enabled(self) -> bool:
        return self.scheduler != "none"

    @property
    def integer(self) -> bool:
        """Whether resources are whole units (folds, iterations)."""
        return self.resource in INTEGER_RESOURCES

    def schedule(self) -> BracketSchedule | None:
        """The brackets the scheduler runs, cycling; None without one.

        Successive halving repeats one bracket of the fewest configurations
        that leave one at max_resource (n = ceil(eta^s_max), Hyperband's most
        exploratory bracket when max / min is a power of eta); Hyperband and
        BOHB cycle Hyperband's brackets.
        """
        if not self.enabled:
            return None
        if self.scheduler == "successive_halving":
            s_max = max_bracket_index(self.min_resource, self.max_resource, self.eta)
            n_configs = ceil_exact(Fraction(self.eta) ** s_max)
            return BracketSchedule(
                [
                    successive_halving_rungs(
                        n_configs,
                        self.min_resource,
                        self.max_resource,
                        self.eta,
                        integer=self.integer,
                    )
                ]
            )
        return HyperbandSchedule(
            self.min_resource, self.max_resource, self.eta, integer=self.integer
        )


# --- the `parallel` block (core.runners) ---------------------------------------


@dataclass(frozen=True)
class ParallelSettings:
    """The `parallel` block: where and how many trials run at once.

    backend: local (processes on this machine) | dask (a Dask cluster);
    n_workers: trials at once (local: worker processes; dask without an
    address: the LocalCluster's size; dask with an address: null takes the
    cluster's worker threads); address: an existing scheduler
    (tcp://host:8786), else $DASK_SCHEDULER_ADDRESS, else a LocalCluster is
    started; mode: sync (proposals from the trials before the last n_workers
    proposed, results taken in proposal order: identical for a seed and
    n_workers) | async (proposals from every trial that has ended).
    """

    backend: str = "local"
    n_workers: int | None = 1
    address: str | None = None
    mode: str = "sync"

    @classmethod
    def from_block(cls, block: Mapping[str, Any] | None) -> ParallelSettings:
        """The settings of a `parallel` block, checked; None: serial."""
        if block is None:
            return cls()
        if not isinstance(block, Mapping):
            raise ValueError(f"parallel must be a mapping, got {block!r}")
        known = ("backend", "n_workers", "address", "mode")
        unknown = sorted(set(block) - set(known))
        if unknown:
            raise ValueError(
                f"parallel has unknown keys {unknown}{did_you_mean(unknown, known)}; "
                "known: backend, n_workers, "
                "address, mode"
            )
        settings = cls(**block)
        if settings.backend not in BACKENDS:
            raise ValueError(
                f"parallel.backend={settings.backend!r} is not one of {list(BACKENDS)}"
            )
        if settings.mode not in MODES:
            raise ValueError(
                f"parallel.mode={settings.mode!r} is not one of {list(MODES)}"
            )
        workers = settings.n_workers
        if workers is None:
            if settings.backend == "local":
                raise ValueError("parallel.n_workers=null needs backend: dask")
        elif isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(
                f"parallel.n_workers must be a positive integer or null, got {workers!r}"
            )
        if settings.address is not None and (
            settings.backend != "dask" or not isinstance(settings.address, str)
        ):
            raise ValueError(
                f"parallel.address={settings.address!r} needs backend: dask and a "
                "scheduler address such as tcp://10.0.0.5:8786"
            )
        return settings

    @property
    def serial(self) -> bool:
        return self.backend == "local" and self.n_workers == 1
