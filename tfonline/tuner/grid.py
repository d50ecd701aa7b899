"""A knob space's settings as rows of encoded values (:meth:`KnobSpace.encode`), for scoring many at once.

EI is maximised over every setting of a space of up to 25,000 (16,128 on a
4-node, 2-core cluster: :class:`~tfonline.tuner._gpyopt.Fitted`), at every
decision. Nothing here loops over the rows in Python: a knob's column is
read through its distinct codes.
"""

from __future__ import annotations

import itertools
from typing import Any, Sequence

import numpy as np

from tfonline.tuner.space import KnobSpace


def feasible(space: KnobSpace, rows: np.ndarray) -> np.ndarray:
    """Which rows of encoded settings keep ps + worker within the nodes alive."""
    total = np.zeros(len(rows))
    for name in ("ps", "worker"):
        if name in space.free:
            value = {space.encode_value(name, v): v for v in space.values[name]}
            codes, inverse = np.unique(rows[:, space.free.index(name)], return_inverse=True)
            total += np.array([value[code] for code in codes], dtype=float)[inverse.ravel()]
        else:
            total += space.values[name][0]
    return total <= space.nodes_alive


def values_of(space: KnobSpace, rows: np.ndarray, names: Sequence[str]) -> tuple[list[tuple], np.ndarray]:
    """The distinct values of knobs ``names`` among rows of encoded settings, and each row's index into them."""
    free = [name for name in names if name in space.free]
    if not free:
        return [tuple(space.values[name][0] for name in names)], np.zeros(len(rows), dtype=int)
    codes, inverse = np.unique(rows[:, [space.free.index(name) for name in free]], axis=0, return_inverse=True)
    values = []
    for row in codes:
        coded = dict(zip(free, row))
        values.append(tuple(space.decode_value(name, coded[name]) if name in coded else space.values[name][0]
                            for name in names))
    return values, inverse.ravel()


class SettingGrid:
    """Every feasible combination of some encoded choices, kept while the choices and the nodes alive stay
    (making it took a tenth of a decision's CPU on the CNN's space), with its knobs' values as read."""

    def __init__(self, space: KnobSpace):
        self.space = space
        self._made: tuple[Any, np.ndarray] | None = None
        self._values: dict[tuple[str, ...], tuple[list[tuple], np.ndarray]] = {}  # of the rows made, by names

    def rows(self, choices: Sequence[Sequence[float]]) -> np.ndarray:
        """The grid of ``choices`` (each free knob's encoded values), feasible rows only."""
        key = (tuple(map(tuple, choices)), self.space.nodes_alive)
        if self._made is None or self._made[0] != key:
            rows = np.array(list(itertools.product(*choices)), dtype=float)
            self._made, self._values = (key, rows[feasible(self.space, rows)]), {}
        return self._made[1]

    def values_of(self, rows: np.ndarray, names: Sequence[str]) -> tuple[list[tuple], np.ndarray]:
        """:func:`values_of`, kept for the grid's own rows, which every decision reads for the speeds' knobs
        (and the speed model's, with its prior: 17 ms for both on the CNN's space). Kept, a decision there took
        50.5 ms against 57.8 ms (20 observations, no prior)."""
        if self._made is None or rows is not self._made[1]:
            return values_of(self.space, rows, names)
        names = tuple(names)
        if names not in self._values:
            self._values[names] = values_of(self.space, rows, names)
        return self._values[names]
