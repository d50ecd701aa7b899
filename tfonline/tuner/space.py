"""The space the tuner searches: the knobs, their domains on a cluster, and their encoding for the GP.

A :class:`KnobSpace` starts from the eleven knobs of the paper's Table I
(:func:`tfonline.setting.knob_table`), with domains derived from the
cluster, and lets the user

- **pin** a knob (``{"global_jit_level": "OFF"}``): it keeps that value;
- **narrow** a domain (``{"worker": [1, 2]}``): only those values are tried;
- **add** a knob (:class:`~tfonline.setting.Knob` with an ``apply``
  function that sets it in the session's ``ConfigProto``).

Encoding for the GP (DESIGN §3): integers as themselves, or their log2 when
the range spans a factor of 64 or more; log-scaled knobs by log10; booleans
as 0/1; ordinal knobs by their index; nominal knobs one-hot (GPyOpt's
categorical variables).
"""

from __future__ import annotations

import math
import random
from typing import Any, Iterable, Sequence

from tfonline.exceptions import ConfigurationError
from tfonline.setting import Knob, default_setting, knob_table

# An integer knob whose largest value is at least this many times its smallest is encoded for the GP in log2.
# A layout's time per iteration goes with ratios (Optimus's w/p; an asynchronous iteration is a step over w),
# which a GP with one length scale per knob follows in logs, not in counts: on the paper's 36-node cluster,
# simulated (20 timed settings, 40 untried, seeds 0-5), its rank correlation with the true times went from
# 0.72 to 0.98, and its median error from 24% to 7% (NOTES.md, twenty-third session). 8 keeps the small
# clusters of this machine's tests and examples (counts 1-4) as they were.
LOG_RANGE = 8


def knob_values(knob: Knob) -> list:
    """Every value the tuner may try for ``knob``: its whole domain; a log-int range on a grid of
    ``low``·10^k, plus ``high``."""
    if knob.choices is not None:
        return list(knob.choices)
    if knob.kind == "bool":
        return [False, True]
    if knob.kind == "log-int":
        values, value = [knob.low], knob.low * 10
        while value <= knob.high / 2:
            values.append(value)
            value *= 10
        return values + ([knob.high] if knob.high > knob.low else [])
    return list(range(knob.low, knob.high + 1))


class KnobSpace:
    """The knobs of one job on one cluster, with the user's pins, narrowed domains and added knobs.

    Args:
        node_count: nodes of the cluster (bounds ``ps`` and ``worker``).
        cores: cores per node (bounds the thread pools).
        restrict: knob name to a value (pin) or a list of values (narrow).
        extra_knobs: knobs the user adds; each must be of reconfiguration
            type ``II`` and have an ``apply(config_proto, value)``.
        initial: the setting the job starts from (its values of pinned
            knobs must agree with the pins).
    """

    def __init__(self, node_count: int, cores: int, restrict: dict[str, Any] | None = None,
                 extra_knobs: Sequence[Knob] = ()):
        self.node_count = node_count
        self.nodes_alive = node_count  # fewer once the job lost a node (see fits)
        self.cores = cores
        self.knobs: dict[str, Knob] = dict(knob_table(node_count, cores))
        self.defaults = default_setting(node_count, cores)
        for knob in extra_knobs:
            self._add(knob)
        self.extra_knobs = tuple(extra_knobs)
        self.values: dict[str, list] = {name: knob_values(knob) for name, knob in self.knobs.items()}
        for name, knob in self.knobs.items():  # a log grid may miss the default
            if knob.kind == "log-int" and self.defaults[name] not in self.values[name]:
                self.values[name] = sorted(self.values[name] + [self.defaults[name]])
        self.pinned: dict[str, Any] = {}
        if restrict is not None and not isinstance(restrict, dict):
            raise ConfigurationError(f"space must be a dict of knob name to a value or a list of values, "
                                     f"got {type(restrict).__name__}")
        for name, wanted in (restrict or {}).items():
            self._restrict(name, wanted)
        for name in ("ps", "worker"):
            self.values[name] = [v for v in self.values[name] if v + min(self.values[_other(name)]) <= node_count]
            if not self.values[name]:
                raise ConfigurationError(f"space leaves no value of {name} with ps + worker <= {node_count}")

    def _add(self, knob: Knob) -> None:
        if not isinstance(knob, Knob):
            raise ConfigurationError(f"extra_knobs must hold tfonline.setting.Knob objects, got {knob!r}")
        if knob.name in self.knobs:
            raise ConfigurationError(f"extra knob {knob.name!r} already exists; pin or narrow it with space instead")
        if knob.reconfiguration != "II" or not callable(knob.apply):
            raise ConfigurationError(
                f"extra knob {knob.name!r} must be of reconfiguration type II with an apply(config_proto, value) "
                f"function, got type {knob.reconfiguration!r} and apply={knob.apply!r}")
        values = knob_values(knob)
        if not values:
            raise ConfigurationError(f"extra knob {knob.name!r} has an empty domain")
        default = knob.default if knob.default is not None else values[0]
        self.knobs[knob.name] = knob
        self.defaults[knob.name] = knob.check(default)

    def _restrict(self, name: str, wanted: Any) -> None:
        if name not in self.knobs:
            raise ConfigurationError(f"space names an unknown knob {name!r}; known knobs: {', '.join(self.knobs)}")
        knob = self.knobs[name]
        if isinstance(wanted, (list, tuple, set, frozenset)):
            if not wanted:
                raise ConfigurationError(f"space gives knob {name} an empty list of values")
            values = sorted({knob.check(v) for v in wanted}, key=self.values[name].index
                            if knob.kind not in ("int", "log-int") else None)
            self.values[name] = values
        else:
            self.values[name] = [knob.check(wanted)]
        if len(self.values[name]) == 1:
            self.pinned[name] = self.values[name][0]

    # -- settings --------------------------------------------------------------

    @property
    def free(self) -> list[str]:
        """The knobs the tuner varies, ps and worker first."""
        return [name for name in self.knobs if len(self.values[name]) > 1]

    def contains(self, setting: dict[str, Any]) -> bool:
        return (all(setting.get(n) in self.values[n] for n in self.knobs)
                and setting["ps"] + setting["worker"] <= self.node_count)

    def fits(self, setting: dict[str, Any]) -> bool:
        """Whether ``setting``'s ps + worker fit the nodes alive now: a lost node leaves fewer to propose."""
        return setting["ps"] + setting["worker"] <= self.nodes_alive

    def start(self, setting: dict[str, Any]) -> dict[str, Any]:
        """The job's first setting: ``setting`` (already resolved) with the space's pins applied."""
        start = dict(self.defaults)
        start.update(setting)
        for name, value in self.pinned.items():
            start[name] = value
        if not self.contains(start):
            outside = [n for n in self.knobs if start.get(n) not in self.values[n]]
            if outside:
                n = outside[0]
                raise ConfigurationError(f"the starting setting's {n}={start[n]!r} is outside the tuning space "
                                         f"{self.values[n]!r}")
            raise ConfigurationError(f"the starting setting's ps + worker must be <= {self.node_count}")
        return start

    def sample(self, rng: random.Random, exclude: Iterable[dict[str, Any]] = ()) -> dict[str, Any]:
        """A uniformly random setting of the space, unlike those in ``exclude`` when possible."""
        seen = [dict(s) for s in exclude]
        candidate = None
        for _ in range(100):
            candidate = {name: rng.choice(values) for name, values in self.values.items()}
            if not self.fits(candidate):
                continue
            if candidate not in seen:
                return candidate
        if candidate is None or not self.fits(candidate):
            candidate = dict(self.defaults, ps=min(self.values["ps"]), worker=min(self.values["worker"]))
            candidate.update(self.pinned)
        return candidate

    # -- encoding for the GP ------------------------------------------------

    def encode_value(self, name: str, value: Any) -> float | int:
        knob = self.knobs[name]
        if knob.kind == "bool":
            return int(value)
        if knob.kind == "ordinal":
            return knob.choices.index(value)
        if knob.kind == "nominal":  # GPyOpt one-hot encodes 0 .. k-1, so the index among the space's values
            return self.values[name].index(value)
        if knob.kind == "log-int":
            return math.log10(value)
        if self._log2(name):
            return math.log2(value)
        return value

    def decode_value(self, name: str, code: float) -> Any:
        """The domain value nearest to ``code``."""
        return min(self.values[name], key=lambda v: abs(self.encode_value(name, v) - code))

    def _log2(self, name: str) -> bool:
        knob = self.knobs[name]
        return knob.kind == "int" and knob.low > 0 and knob.high / knob.low >= LOG_RANGE

    def encode(self, setting: dict[str, Any]) -> list[float]:
        """The free knobs of ``setting``, encoded, in :attr:`free` order (nominal knobs as their index)."""
        return [self.encode_value(name, setting[name]) for name in self.free]

    def decode(self, codes: Sequence[float]) -> dict[str, Any]:
        setting = {name: values[0] for name, values in self.values.items()}
        setting.update(self.pinned)
        for name, code in zip(self.free, codes):
            setting[name] = self.decode_value(name, code)
        return setting

    def gpyopt_domain(self) -> list[dict[str, Any]]:
        """GPyOpt's description of the free knobs (then the loss is appended by the optimizer)."""
        domain = []
        for name in self.free:
            codes = tuple(sorted({self.encode_value(name, v) for v in self.values[name]}))
            kind = "categorical" if self.knobs[name].kind == "nominal" else "discrete"
            domain.append({"name": name, "type": kind, "domain": codes})
        return domain

    def describe(self) -> dict[str, Any]:
        """What the repository records of the space."""
        return {name: {"kind": knob.kind, "reconfiguration": knob.reconfiguration, "applied_by": knob.applied_by,
                       "values": self.values[name] if len(self.values[name]) <= 16
                       else [self.values[name][0], "...", self.values[name][-1]],
                       "pinned": name in self.pinned}
                for name, knob in self.knobs.items()}


def _other(name: str) -> str:
    return "worker" if name == "ps" else "ps"
