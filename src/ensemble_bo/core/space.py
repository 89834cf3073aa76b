"""Search spaces: named hyperparameters, conditions, and their unit-cube encoding.

A space is declared as a mapping (from YAML) of parameter name to a spec::

    kernel: {type: categorical, choices: [rbf, linear, poly]}
    C: {type: float, low: 1.0e-3, high: 1.0e3, log: true}
    gamma: {
        type: float,
        low: 1.0e-5,
        high: 10,
        log: true,
        condition: {kernel: [rbf, poly]},
    }
    degree: {type: int, low: 2, high: 5, condition: {kernel: poly}}
    max_iter: {type: constant, value: 1000000}

Types: `float` and `int` (`low`, `high`, optional `log`), `categorical`
(`choices`) and `constant` (`value`). A constant is a setting that is not
searched but changes results (a number of trees, an iteration cap): it is no
dimension of the encoding, and every configuration (from `decode`, `grid`)
carries it, so it reaches the estimator factory and the trial history from
conf rather than from a default hidden in code.

A parameter with a `condition` is active only when the named categorical
parameter (declared before it) takes one of the listed values; configurations
hold active parameters only. A constant may have a condition, but cannot be
one's parent.

Encoding, as the GP sees it (shape (dim,) in [0, 1]^dim):
- float and int: one dimension, linear or log; ints own equal-width bins;
- categorical: one dimension per choice, one-hot (an ordinal code would tell
  the GP that the first and last choices are the furthest apart);
- constant: no dimension; `encode` accepts a configuration with or without
  it (the point is the same), but not one that gives it another value;
- an inactive parameter: every one of its dimensions at INACTIVE_VALUE, so
  configurations that differ only in parameters that do not apply to them are
  the same point to the GP. Candidates of the acquisition maximizer go through
  `canonicalize`, which applies the same rule, so the GP never ranks points by
  values that have no effect. (An arc kernel or one GP per branch would model
  conditional spaces more finely, at the price of a kernel of our own.)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from numbers import Real
from typing import Any

import numpy as np

_NUMERIC_TYPES = ("float", "int")
INACTIVE_VALUE = 0.5


@dataclass(frozen=True)
class Condition:
    """Active when the categorical parameter `parent` takes one of `values`."""

    parent: str
    values: tuple


@dataclass(frozen=True)
class NumericParameter:
    """A float or int parameter on a linear or log scale.

    Ints are mapped to equal-width bins of the unit interval (the interval
    [low - 0.5, high + 0.5] is scaled), so every integer is equally likely
    under uniform sampling of the cube.
    """

    name: str
    kind: str
    low: float
    high: float
    log: bool = False
    condition: Condition | None = None

    width = 1

    def __post_init__(self) -> None:
        if self.kind not in _NUMERIC_TYPES:
            raise ValueError(f"parameter {self.name!r}: unknown type {self.kind!r}")
        if not (math.isfinite(self.low) and math.isfinite(self.high)):
            raise ValueError(
                f"parameter {self.name!r}: bounds must be finite, got "
                f"low={self.low!r}, high={self.high!r}"
            )
        if self.low > self.high:
            raise ValueError(
                f"parameter {self.name!r}: low={self.low!r} is greater than "
                f"high={self.high!r}; swap them (low is the smallest value searched)"
            )
        if self.log and self.low <= 0:
            raise ValueError(
                f"parameter {self.name!r}: log scale needs low > 0, got "
                f"low={self.low!r}; give a positive low or drop `log: true`"
            )
        if self.kind == "int" and (
            self.low != int(self.low) or self.high != int(self.high)
        ):
            raise ValueError(
                f"parameter {self.name!r}: int bounds must be integers, got "
                f"low={self.low!r}, high={self.high!r}"
            )

    def _interval(self) -> tuple[float, float]:
        low, high = self.low, self.high
        if self.kind == "int":
            low, high = low - 0.5, high + 0.5
        if self.log:
            return math.log(low), math.log(high)
        return low, high

    def encode(self, value: Any) -> np.ndarray:
        if isinstance(value, bool) or not isinstance(value, int | float | np.number):
            raise ValueError(f"parameter {self.name!r}: {value!r} is not a number")
        if not self.low <= value <= self.high:
            raise ValueError(
                f"parameter {self.name!r}: {value!r} is outside "
                f"[{self.low!r}, {self.high!r}]"
            )
        lo, hi = self._interval()
        if hi == lo:
            return np.array([0.5])
        position = math.log(value) if self.log else float(value)
        return np.array([(position - lo) / (hi - lo)])

    def decode(self, unit: np.ndarray) -> float | int:
        lo, hi = self._interval()
        position = lo + float(np.clip(unit[0], 0.0, 1.0)) * (hi - lo)
        value = math.exp(position) if self.log else position
        if self.kind == "int":
            return int(np.clip(round(value), self.low, self.high))
        return float(np.clip(value, self.low, self.high))

    def grid(self, points: int) -> list[float | int]:
        """Up to `points` values evenly spread on the parameter's scale."""
        if self.kind == "int" and self.high - self.low + 1 <= points:
            return list(range(int(self.low), int(self.high) + 1))
        values = [
            self.decode(np.array([u])) for u in (np.arange(points) + 0.5) / points
        ]
        return list(dict.fromkeys(values))


@dataclass(frozen=True)
class CategoricalParameter:
    """A choice among a list, one-hot encoded; the largest coordinate decodes."""

    name: str
    choices: tuple
    condition: Condition | None = None

    def __post_init__(self) -> None:
        if len(self.choices) == 0:
            raise ValueError(f"parameter {self.name!r}: empty choice list")
        if len(set(map(repr, self.choices))) != len(self.choices):
            raise ValueError(
                f"parameter {self.name!r}: duplicate choices in {list(self.choices)}"
            )

    @property
    def width(self) -> int:
        return len(self.choices)

    def encode(self, value: Any) -> np.ndarray:
        if value not in self.choices:
            raise ValueError(
                f"parameter {self.name!r}: {value!r} is not one of {list(self.choices)}"
            )
        one_hot = np.zeros(len(self.choices))
        one_hot[self.choices.index(value)] = 1.0
        return one_hot

    def decode(self, unit: np.ndarray) -> Any:
        return self.choices[int(np.argmax(unit))]

    def grid(self, points: int) -> list:
        return list(self.choices)


@dataclass(frozen=True)
class ConstantParameter:
    """A fixed setting: in every configuration where it is active, never searched.

    It has no dimension (width 0), so the GP neither sees nor spends effort on
    it; `decode` and `grid` put its value in the configuration.
    """

    name: str
    value: Any
    condition: Condition | None = None

    width = 0

    def encode(self, value: Any) -> np.ndarray:
        if value != self.value:
            raise ValueError(
                f"parameter {self.name!r}: {value!r} is not its constant value "
                f"{self.value!r}"
            )
        return np.empty(0)

    def decode(self, unit: np.ndarray) -> Any:
        return self.value

    def grid(self, points: int) -> list:
        return [self.value]


Parameter = NumericParameter | CategoricalParameter | ConstantParameter

# The keys each type of spec may have; any other is refused (a typo would
# otherwise be ignored silently).
_CONSTANT_KEYS = ("type", "value", "condition")
_NUMERIC_KEYS = ("type", "low", "high", "log", "condition")
_CATEGORICAL_KEYS = ("type", "choices", "condition")


def _refuse_unknown_keys(name: str, spec: Mapping[str, Any], kind: str, keys) -> None:
    unknown = [key for key in spec if key not in keys]
    if unknown:
        raise ValueError(
            f"parameter {name!r}: unknown keys {unknown} for "
            f"{'an' if kind[0] in 'aeiou' else 'a'} {kind} (expected {list(keys)})"
        )


def _bound(name: str, spec: Mapping[str, Any], key: str) -> float:
    """`spec[key]` as a float; text such as "1.0e3" counts (plain YAML reads it so)."""
    value = spec[key]
    try:
        if isinstance(value, bool) or not isinstance(value, Real | str):
            raise TypeError
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(
            f"parameter {name!r}: {key}={value!r} is not a number; give {key} as a "
            "number, e.g. 1.0e-3"
        ) from None


def _condition_from_spec(name: str, spec: Any) -> Condition | None:
    if spec is None:
        return None
    if not isinstance(spec, Mapping) or len(spec) != 1:
        raise ValueError(
            f"parameter {name!r}: condition must name one parameter, e.g. "
            f"{{kernel: [rbf, poly]}}, got {spec!r}"
        )
    ((parent, values),) = spec.items()
    if isinstance(values, str) or not isinstance(values, Sequence):
        values = [values]
    return Condition(str(parent), tuple(values))


def parameter_from_spec(name: str, spec: Mapping[str, Any]) -> Parameter:
    """Build one parameter from its YAML spec, with errors that name it."""
    if not isinstance(spec, Mapping):
        raise ValueError(f"parameter {name!r}: spec must be a mapping, got {spec!r}")
    kind = spec.get("type")
    condition = _condition_from_spec(name, spec.get("condition"))
    if kind == "categorical":
        _refuse_unknown_keys(name, spec, "categorical", _CATEGORICAL_KEYS)
        choices = spec.get("choices")
        if not isinstance(choices, Sequence) or isinstance(choices, str):
            raise ValueError(
                f"parameter {name!r}: 'choices' must be a list, got {choices!r}"
            )
        return CategoricalParameter(name, tuple(choices), condition)
    if kind == "constant":
        _refuse_unknown_keys(name, spec, "constant", _CONSTANT_KEYS)
        if "value" not in spec:
            raise ValueError(f"parameter {name!r}: a constant needs a 'value'")
        return ConstantParameter(name, spec["value"], condition)
    if kind in _NUMERIC_TYPES:
        _refuse_unknown_keys(name, spec, kind, _NUMERIC_KEYS)
        missing = [key for key in ("low", "high") if key not in spec]
        if missing:
            raise ValueError(f"parameter {name!r}: missing {', '.join(missing)}")
        log = spec.get("log", False)
        if not isinstance(log, bool):
            raise ValueError(f"parameter {name!r}: log={log!r} is not true or false")
        return NumericParameter(
            name,
            kind,
            _bound(name, spec, "low"),
            _bound(name, spec, "high"),
            log,
            condition,
        )
    raise ValueError(
        f"parameter {name!r}: unknown type {kind!r} (expected float, int, "
        "categorical or constant)"
    )


class SearchSpace:
    """An ordered set of hyperparameters, some conditional, encoded to [0, 1]^dim."""

    def __init__(self, parameters: Sequence[Parameter]):
        if not parameters:
            raise ValueError("a search space needs at least one parameter")
        names = [p.name for p in parameters]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate parameter names in {names}")
        declared: dict[str, Parameter] = {}
        for parameter in parameters:
            if parameter.condition is not None:
                self._check_condition(parameter, declared)
            declared[parameter.name] = parameter
        self.parameters = tuple(parameters)
        offsets = np.cumsum([0] + [p.width for p in parameters])
        self._slices = {
            p.name: slice(int(start), int(stop))
            for p, start, stop in zip(
                parameters, offsets[:-1], offsets[1:], strict=True
            )
        }
        self.dim = int(offsets[-1])
        if self.dim == 0:
            raise ValueError(
                f"a search space needs at least one parameter to search; {names} "
                "are all constants"
            )

    @staticmethod
    def _check_condition(
        parameter: Parameter, declared: Mapping[str, Parameter]
    ) -> None:
        condition = parameter.condition
        parent = declared.get(condition.parent)
        if parent is None:
            raise ValueError(
                f"parameter {parameter.name!r}: condition on {condition.parent!r}, which "
                "is not a parameter declared before it"
            )
        if isinstance(parent, ConstantParameter):
            raise ValueError(
                f"parameter {parameter.name!r}: condition on {condition.parent!r}, which "
                f"is a constant (always {parent.value!r}); a condition needs a "
                "categorical parameter"
            )
        if not isinstance(parent, CategoricalParameter):
            raise ValueError(
                f"parameter {parameter.name!r}: condition on {condition.parent!r}, which "
                "is not categorical"
            )
        unknown = [v for v in condition.values if v not in parent.choices]
        if unknown:
            raise ValueError(
                f"parameter {parameter.name!r}: condition values {unknown} are not "
                f"choices of {condition.parent!r} {list(parent.choices)}"
            )

    @classmethod
    def from_dict(cls, specs: Mapping[str, Mapping[str, Any]]) -> SearchSpace:
        if not isinstance(specs, Mapping):
            raise ValueError(
                f"a search space must be a mapping of parameters, got {specs!r}"
            )
        return cls([parameter_from_spec(name, spec) for name, spec in specs.items()])

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.parameters]

    def is_active(self, parameter: Parameter, config: Mapping[str, Any]) -> bool:
        condition = parameter.condition
        return condition is None or config.get(condition.parent) in condition.values

    def encode(self, config: Mapping[str, Any]) -> np.ndarray:
        """Configuration (active parameters only) -> point of shape (dim,).

        Constants add no coordinates: one may be left out, but one given must
        have its declared value.
        """
        unknown = set(config) - set(self.names)
        if unknown:
            raise ValueError(
                f"unknown parameters {sorted(unknown)}; space has {self.names}"
            )
        point = np.full(self.dim, INACTIVE_VALUE)
        for parameter in self.parameters:
            active = self.is_active(parameter, config)
            if (
                active
                and parameter.name not in config
                and not isinstance(parameter, ConstantParameter)
            ):
                raise ValueError(f"configuration lacks parameter {parameter.name!r}")
            if not active and parameter.name in config:
                condition = parameter.condition
                raise ValueError(
                    f"parameter {parameter.name!r} is given but inactive: it applies only "
                    f"when {condition.parent!r} is one of {list(condition.values)}"
                )
            if active and parameter.name in config:
                point[self._slices[parameter.name]] = parameter.encode(
                    config[parameter.name]
                )
        return point

    def decode(self, unit_point: np.ndarray) -> dict[str, Any]:
        """Point of shape (dim,) in [0, 1]^dim -> configuration of its active parameters."""
        unit_point = np.asarray(unit_point, dtype=float)
        if unit_point.shape != (self.dim,):
            raise ValueError(
                f"expected a point of shape ({self.dim},), got {unit_point.shape}"
            )
        config: dict[str, Any] = {}
        for parameter in self.parameters:
            if self.is_active(parameter, config):
                config[parameter.name] = parameter.decode(
                    unit_point[self._slices[parameter.name]]
                )
        return config

    def canonicalize(self, points: np.ndarray) -> np.ndarray:
        """Points (m, dim) as the GP should see them: one-hot categoricals, inactive at 0.5.

        Numeric coordinates are left continuous (ints are not rounded) so that
        the acquisition stays smooth for the gradient-based maximizer.
        """
        return self.canonicalize_with_passthrough(points)[0]

    def canonicalize_with_passthrough(
        self, points: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`canonicalize` (m, dim) and where it passes points through, (m, dim) bool.

        True marks an active numeric coordinate: canonical equals point there. Every
        other canonical coordinate is locally constant in the point (a one-hot from an
        argmax, or INACTIVE_VALUE), so a gradient w.r.t. the canonical point is one
        w.r.t. the point once zeroed outside the passthrough.
        """
        points = np.array(points, dtype=float, ndmin=2)
        passthrough = np.zeros(points.shape, dtype=bool)
        choice_index: dict[str, np.ndarray] = {}
        active: dict[str, np.ndarray] = {}
        for parameter in self.parameters:
            columns = self._slices[parameter.name]
            condition = parameter.condition
            if condition is None:
                is_active = np.ones(len(points), dtype=bool)
            else:
                parent = next(p for p in self.parameters if p.name == condition.parent)
                wanted = [parent.choices.index(v) for v in condition.values]
                is_active = active[parent.name] & np.isin(
                    choice_index[parent.name], wanted
                )
            active[parameter.name] = is_active
            if isinstance(parameter, CategoricalParameter):
                choice_index[parameter.name] = np.argmax(points[:, columns], axis=1)
                one_hot = np.eye(parameter.width)[choice_index[parameter.name]]
                points[:, columns] = one_hot
            else:
                passthrough[is_active, columns] = True
            points[~is_active, columns] = INACTIVE_VALUE
        return points, passthrough

    def grid(self, points_per_dimension: int) -> list[dict[str, Any]]:
        """Every combination of per-parameter grid values, inactive branches pruned."""
        if points_per_dimension < 1:
            raise ValueError(
                f"points_per_dimension must be >= 1, got {points_per_dimension!r}"
            )
        configs: list[dict[str, Any]] = [{}]
        for parameter in self.parameters:
            values = parameter.grid(points_per_dimension)
            configs = [
                {**config, parameter.name: value}
                if self.is_active(parameter, config)
                else config
                for config in configs
                for value in (values if self.is_active(parameter, config) else [None])
            ]
        return configs
