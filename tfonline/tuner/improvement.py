"""Gains read off normal beliefs: a setting's :class:`Prediction` against the current one, and expected improvement.

The GP (:mod:`tfonline.tuner._gpyopt`) gives each setting's log R̂ a normal
mean and variance; these turn them into what a decision weighs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np


LARGEST_LOG = 700.0  # e^700 s: beyond any job, and below math.exp's overflow (about 709.8)


def seconds(log_s: float) -> float:
    """Seconds from a mean log R̂, at most e^:data:`LARGEST_LOG`. A GP read far from its data can give a mean
    beyond math.exp's range (a simulated CNN run's tuner failed on one), and such a setting is simply slow."""
    return math.exp(min(log_s, LARGEST_LOG))


@dataclass(frozen=True)
class Prediction:
    """The GP's view of one setting against the current one, at the current loss."""

    setting: dict[str, Any]
    remaining_s: float  # the GP's mean R̂ (the exp of its mean log R̂)
    gain_s: float  # the current setting's mean R̂ minus this one's: what a switch is predicted to save
    confidence: float  # P(this setting's latent log R̂ is below the current one's), covariance included


def against(setting: dict[str, Any], mean: float, current_mean: float, variance: float) -> Prediction:
    """A setting's :class:`Prediction` from its mean, the current setting's, and the variance of their difference."""
    sd = math.sqrt(max(variance, 0.0))
    if sd > 0:
        confidence = 0.5 * math.erfc(-(current_mean - mean) / sd / math.sqrt(2))
    else:
        confidence = 1.0 if mean < current_mean else 0.0
    return Prediction(setting, seconds(mean), seconds(current_mean) - seconds(mean), confidence)


def expected_improvements(incumbent: float, mean: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """E[max(incumbent − f, 0)] for each f ~ N(mean, sd²), in arrays."""
    from scipy.stats import norm

    gap = incumbent - mean
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(sd > 0, gap / np.where(sd > 0, sd, 1.0), 0.0)
        ei = gap * norm.cdf(z) + sd * norm.pdf(z)
    return np.where(sd > 0, np.maximum(ei, 0.0), np.maximum(gap, 0.0))


def expected_improvement(incumbent: float, mean: float, sd: float) -> float:
    """E[max(incumbent − f, 0)] for f ~ N(mean, sd²)."""
    if not sd > 0:
        return max(0.0, incumbent - mean)
    z = (incumbent - mean) / sd
    return max(0.0, (incumbent - mean) * 0.5 * math.erfc(-z / math.sqrt(2))
               + sd * math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi))
