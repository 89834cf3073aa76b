"""Search spaces: named hyperparameters and their encoding to the unit cube.

A space is declared as a mapping (from YAML) of parameter name to a spec::

    max_depth: {type: int, low: 1, high: 30}
    max_features: {type: float, low: 0.05, high: 1.0}
    learning_rate: {type: float, low: 1.0e-4, high: 1.0, log: true}
    activation: {type: categorical, choices: [relu, tanh]}

The optimizer works in [0, 1]^d; `SearchSpace.decode` maps a point back to a
configuration and `SearchSpace.encode` does the reverse (exact round trip for
valid configurations).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

_NUMERIC_TYPES = ("float", "int")


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
                f"high={self.high!r}"
            )
        if self.log and self.low <= 0:
            raise ValueError(
                f"parameter {self.name!r}: log scale needs low > 0, got low={self.low!r}"
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

    def encode(self, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float | np.number):
            raise ValueError(f"parameter {self.name!r}: {value!r} is not a number")
        if not self.low <= value <= self.high:
            raise ValueError(
                f"parameter {self.name!r}: {value!r} is outside "
                f"[{self.low!r}, {self.high!r}]"
            )
        lo, hi = self._interval()
        if hi == lo:
            return 0.5
        position = math.log(value) if self.log else float(value)
        return (position - lo) / (hi - lo)

    def decode(self, unit: float) -> float | int:
        lo, hi = self._interval()
        position = lo + float(np.clip(unit, 0.0, 1.0)) * (hi - lo)
        value = math.exp(position) if self.log else position
        if self.kind == "int":
            return int(np.clip(round(value), self.low, self.high))
        return float(np.clip(value, self.low, self.high))


@dataclass(frozen=True)
class CategoricalParameter:
    """A choice among a list; each choice owns an equal-width bin of [0, 1]."""

    name: str
    choices: tuple

    def __post_init__(self) -> None:
        if len(self.choices) == 0:
            raise ValueError(f"parameter {self.name!r}: empty choice list")

    def encode(self, value: Any) -> float:
        if value not in self.choices:
            raise ValueError(
                f"parameter {self.name!r}: {value!r} is not one of {list(self.choices)}"
            )
        return (self.choices.index(value) + 0.5) / len(self.choices)

    def decode(self, unit: float) -> Any:
        index = min(
            int(float(np.clip(unit, 0.0, 1.0)) * len(self.choices)),
            len(self.choices) - 1,
        )
        return self.choices[index]


Parameter = NumericParameter | CategoricalParameter


def parameter_from_spec(name: str, spec: Mapping[str, Any]) -> Parameter:
    """Build one parameter from its YAML spec, with errors that name it."""
    if not isinstance(spec, Mapping):
        raise ValueError(f"parameter {name!r}: spec must be a mapping, got {spec!r}")
    kind = spec.get("type")
    if kind == "categorical":
        choices = spec.get("choices")
        if not isinstance(choices, Sequence) or isinstance(choices, str):
            raise ValueError(
                f"parameter {name!r}: 'choices' must be a list, got {choices!r}"
            )
        return CategoricalParameter(name, tuple(choices))
    if kind in _NUMERIC_TYPES:
        missing = [key for key in ("low", "high") if key not in spec]
        if missing:
            raise ValueError(f"parameter {name!r}: missing {', '.join(missing)}")
        return NumericParameter(
            name,
            kind,
            float(spec["low"]),
            float(spec["high"]),
            bool(spec.get("log", False)),
        )
    raise ValueError(
        f"parameter {name!r}: unknown type {kind!r} (expected float, int or categorical)"
    )


class SearchSpace:
    """An ordered set of hyperparameters encoded to [0, 1]^d."""

    def __init__(self, parameters: Sequence[Parameter]):
        names = [p.name for p in parameters]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate parameter names in {names}")
        if not parameters:
            raise ValueError("a search space needs at least one parameter")
        self.parameters = tuple(parameters)

    @classmethod
    def from_dict(cls, specs: Mapping[str, Mapping[str, Any]]) -> SearchSpace:
        return cls([parameter_from_spec(name, spec) for name, spec in specs.items()])

    @property
    def dim(self) -> int:
        return len(self.parameters)

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.parameters]

    def encode(self, config: Mapping[str, Any]) -> np.ndarray:
        """Configuration -> point of shape (d,) in [0, 1]^d."""
        unknown = set(config) - set(self.names)
        if unknown:
            raise ValueError(
                f"unknown parameters {sorted(unknown)}; space has {self.names}"
            )
        missing = [name for name in self.names if name not in config]
        if missing:
            raise ValueError(f"configuration lacks parameters {missing}")
        return np.array([p.encode(config[p.name]) for p in self.parameters])

    def decode(self, unit_point: np.ndarray) -> dict[str, Any]:
        """Point of shape (d,) in [0, 1]^d -> configuration."""
        unit_point = np.asarray(unit_point, dtype=float)
        if unit_point.shape != (self.dim,):
            raise ValueError(
                f"expected a point of shape ({self.dim},), got {unit_point.shape}"
            )
        return {
            p.name: p.decode(u)
            for p, u in zip(self.parameters, unit_point, strict=True)
        }
