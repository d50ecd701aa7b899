"""Progress estimators: how many iterations a job still needs (the paper's §IV).

Estimators are plug-ins found through the entry-point group
``tfonline.estimators``; the built-ins register there too (see setup.py):

- ``hogwild``: the Hogwild! convergence bound fitted online (the paper's).
- ``loss-curve``: Optimus's ``1/(β0·k + β1) + β2`` loss curve.

A third party adds one by registering a :class:`BaseEstimator` subclass in
that group of its own distribution.
"""

from __future__ import annotations

from importlib.metadata import entry_points

from tfonline.estimator._base import BaseEstimator, Segment, clean_segment
from tfonline.estimator._hogwild import HogwildEstimator
from tfonline.estimator._loss_curve import LossCurveEstimator
from tfonline.exceptions import ConfigurationError

ENTRY_POINT_GROUP = "tfonline.estimators"

__all__ = [
    "BaseEstimator",
    "Segment",
    "HogwildEstimator",
    "LossCurveEstimator",
    "ENTRY_POINT_GROUP",
    "available_estimators",
    "clean_segment",
    "get_estimator",
]


def _registered() -> dict[str, object]:
    found: dict[str, object] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in found and found[ep.name].value != ep.value:
            first, second = sorted([found[ep.name], ep], key=lambda e: e.value)
            raise ConfigurationError(
                f"estimator name {ep.name!r} is registered twice: by {first.value} "
                f"({_source(first)}) and by {second.value} ({_source(second)})"
            )
        found[ep.name] = ep
    return found


def _source(ep) -> str:
    dist = getattr(ep, "dist", None)
    return f"distribution {dist.name}" if dist is not None else "unknown distribution"


def available_estimators() -> list[str]:
    """The names of every registered estimator, sorted."""
    return sorted(_registered())


def get_estimator(name: str, **options) -> BaseEstimator:
    """A new estimator of the registered ``name``, made with ``options``."""
    registered = _registered()
    if name not in registered:
        raise ConfigurationError(f"unknown estimator {name!r}; known estimators: {', '.join(sorted(registered))}")
    cls = registered[name].load()
    if not (isinstance(cls, type) and issubclass(cls, BaseEstimator)):
        raise ConfigurationError(
            f"estimator {name!r} must name a BaseEstimator subclass, got {registered[name].value} ({cls!r})"
        )
    try:
        return cls(**options)
    except TypeError as e:
        raise ConfigurationError(f"estimator {name!r} does not take these options: {e}") from e
