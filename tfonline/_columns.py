"""Growable columns of floats: a job's iterations as the driver keeps them.

A job at one setting is one segment, so the segment's points can hold every
iteration of the job, and the ETA refits them every second. Kept as a list of
tuples, each read cost a pass of the interpreter over the whole job, under the
GIL the worker threads need to start their steps. With the outlier filter's
``nanmedian`` (:func:`tfonline.estimator.clean_segment`), it slowed a 200-s
LogR job at the default setting from about 710 to 330 iterations a second as
its points grew; with the estimate switched off the job kept its pace (NOTES.md,
thirty-sixth session). Here appending is amortised O(1) and a read is one
array copy.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

_FIRST_CAPACITY = 1024


class Columns:
    """``width`` float columns that grow by whole rows (the first column increasing, when :meth:`cut_after`
    is used: a step)."""

    def __init__(self, width: int):
        self._data = np.empty((width, _FIRST_CAPACITY))
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def append(self, *row: float) -> None:
        if self._size == self._data.shape[1]:
            self._reserve(self._size + 1)
        self._data[:, self._size] = row
        self._size += 1

    def extend(self, *columns: Sequence[float]) -> None:
        """Appends rows given as columns of one length."""
        count = len(columns[0])
        self._reserve(self._size + count)
        self._data[:, self._size:self._size + count] = columns
        self._size += count

    def columns(self, last: int | None = None) -> tuple[np.ndarray, ...]:
        """A copy of each column: all its rows, or the ``last`` ones."""
        start = 0 if last is None else max(self._size - last, 0)
        return tuple(self._data[:, start:self._size].copy())

    def row(self, index: int) -> tuple[float, ...]:
        if not -self._size <= index < self._size:
            raise IndexError(f"row {index} of {self._size}")
        return tuple(self._data[:, index % self._size].tolist())

    def clear(self) -> None:
        self._size = 0

    def cut_after(self, first: float) -> None:
        """Keeps the rows whose first column is at most ``first``."""
        self._size = int(np.searchsorted(self._data[0, :self._size], first, side="right"))

    def _reserve(self, rows: int) -> None:
        if rows > self._data.shape[1]:
            grown = np.empty((self._data.shape[0], max(rows, 2 * self._data.shape[1])))
            grown[:, :self._size] = self._data[:, :self._size]
            self._data = grown
