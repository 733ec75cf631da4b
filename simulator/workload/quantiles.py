"""Empirical distributions as quantile tables, sampled by inverse transform."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

# The probabilities every fitted table is tabulated at (dense in the tails).
PROBS: tuple[float, ...] = (
    0.0, 0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65,
    0.7, 0.75, 0.8, 0.85, 0.9, 0.925, 0.95, 0.97, 0.98, 0.99, 0.995, 0.999, 1.0,
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class QuantileTable:
    """A non-negative quantity given by its quantiles ``values`` at ``probs``.

    Sampling interpolates the inverse CDF linearly in ``log1p`` space, so heavy tails
    (think times from seconds to hours) are followed between the tabulated points.
    """

    values: tuple[float, ...]
    probs: tuple[float, ...] = PROBS

    def __post_init__(self) -> None:
        if len(self.values) != len(self.probs):
            raise ValueError("values and probs differ in length")
        if any(b < a for a, b in zip(self.values, self.values[1:], strict=False)):
            raise ValueError("quantile values must be non-decreasing")

    def sample(self, rng: np.random.Generator, size: int) -> NDArray[np.float64]:
        return self.at(rng.random(size))

    def at(self, u: NDArray[np.float64]) -> NDArray[np.float64]:
        """The quantiles at probabilities ``u`` (the inverse CDF)."""
        logv = np.log1p(np.asarray(self.values, dtype=np.float64))
        out: NDArray[np.float64] = np.expm1(np.interp(u, np.asarray(self.probs), logv))
        return out

    def cdf(self, x: NDArray[np.float64]) -> NDArray[np.float64]:
        """The probabilities of values ``x`` (the inverse of :meth:`at`)."""
        logv = np.log1p(np.asarray(self.values, dtype=np.float64))
        probs = np.interp(np.log1p(np.asarray(x, dtype=np.float64)), logv, np.asarray(self.probs))
        return np.asarray(probs, dtype=np.float64)

    def one(self, rng: np.random.Generator) -> float:
        return float(self.sample(rng, 1)[0])

    @classmethod
    def fit(cls, data: NDArray[np.float64] | list[float], digits: int = 4) -> QuantileTable:
        """The table of ``data`` at :data:`PROBS` (rounded to ``digits`` significant digits)."""
        q = np.quantile(np.asarray(data, dtype=np.float64), PROBS)
        return cls(tuple(float(f"{v:.{digits}g}") for v in np.maximum.accumulate(q)))
