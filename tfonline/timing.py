"""Time per iteration, measured the one way the tuner, the switch cost and the report share."""

from __future__ import annotations

import math

import numpy as np

# Tukey's far-out fence: a gap between iterations above Q3 + TUKEY_K * IQR is a stall, not the setting's pace.
TUKEY_K = 3.0


def _kept_gaps(walls: np.ndarray, warmup: int) -> np.ndarray | None:
    """The gaps between iterations after the warm-up, those beyond Tukey's far-out fence left out (all of them
    when none is within it); None under 2 gaps."""
    walls = np.asarray(walls, dtype=float)[warmup:]
    if walls.size < 3:
        return None
    gaps = np.diff(walls)
    q1, q3 = np.percentile(gaps, [25, 75])
    kept = gaps[gaps <= q3 + TUKEY_K * (q3 - q1)]
    return kept if kept.size else gaps


def per_iteration_time(walls: np.ndarray, warmup: int) -> float | None:
    """Mean wall time per iteration after the warm-up, gaps beyond Tukey's far-out fence left out.

    A gap between consecutive iterations above Q3 + 3·IQR (a stall of the
    machine, a garbage collection) is an outlier of the timing, not of the
    setting. Needs at least 3 iterations after the warm-up.
    """
    gaps = _kept_gaps(walls, warmup)
    return None if gaps is None else float(gaps.mean())


# The batches a segment's gaps are cut into to measure its mean's standard error (each of at least MIN_BATCH gaps).
BATCHES, MIN_BATCH = 10, 5


def gap_spread(walls: np.ndarray, warmup: int) -> float | None:
    """How noisy a segment's timing is: the relative standard error of :func:`per_iteration_time`'s mean, times
    the square root of the gaps it averages (so that n gaps like these time a mean within spread / sqrt(n)).

    The standard error is that of :data:`BATCHES` batch means of consecutive gaps, not the gaps' own deviation
    over sqrt(n): an asynchronous job's gaps alternate (its workers step in turn) and a loaded machine's drift,
    so consecutive gaps are not independent. None under BATCHES x MIN_BATCH gaps.
    """
    gaps = _kept_gaps(walls, warmup)
    return None if gaps is None else _spread(gaps)


def _spread(gaps: np.ndarray) -> float | None:
    """:func:`gap_spread` of gaps already kept (:func:`_kept_gaps`)."""
    if gaps.size < BATCHES * MIN_BATCH or not gaps.mean() > 0:
        return None
    means = np.array([batch.mean() for batch in np.array_split(gaps, BATCHES)])
    return float(means.std(ddof=1) / np.sqrt(BATCHES) * np.sqrt(gaps.size) / gaps.mean())


def iterations_to_time(spread: float, precision: float) -> int:
    """The iterations whose mean time per iteration is within ``precision`` (one relative standard error), for
    gaps of :func:`gap_spread` ``spread``."""
    return math.ceil((spread / precision) ** 2)


# A random setting's segment is there to time the setting for the GP (one segment hardly measures how fast it
# converges): it lasts the iterations that time it within this relative standard error, not min_segment_s, which
# is there for the online phase's segments (tfonline.tuner.manager). On this machine one setting's time per
# iteration drifts by 3-3.5% over windows of 1-10 s, in episodes of 3-10 s of 5-12% (a 70-s LogR run: NOTES.md,
# 2026-11-26): a tighter timing would be lost in the drift between segments.
TIMING_PRECISION = 0.05


class Timing:
    """How many iterations time a random setting's segment within :data:`TIMING_PRECISION`, while the job runs
    one (``random``, which the tuner sets): from the :func:`gap_spread` of the latest ``latest`` segments that had
    enough iterations to measure it (their root mean square: one segment's spread, from 10 batches, is off by a
    quarter, and its square more).

    With ``most_s``, at most the iterations that last ``most_s`` at the pace of the latest segment measured: the
    segment the rule replaced (``min_segment_s``), at that pace, is its ceiling, so that a machine whose timing scatters widely
    (a spread of 3 needs 3,600 iterations) makes no random segment much longer than it was without the rule.
    """

    def __init__(self, latest: int = 5, most_s: float | None = None):
        self.latest, self.most_s = latest, most_s
        self.spreads: list[float] = []
        self.needed: int | None = None  # the iterations that time a setting; None before any segment measured
        self.random = False  # the job runs a random setting that no decision has judged since

    def segment_ended(self, walls: np.ndarray, warmup: int) -> None:
        gaps = _kept_gaps(walls, warmup)  # once: the spread and the pace are both read from them
        spread = None if gaps is None else _spread(gaps)
        if spread is not None:  # the driver asks for the length at every check: it is worked out here, once
            self.spreads = (self.spreads + [spread])[-self.latest:]
            rms = math.sqrt(sum(s * s for s in self.spreads) / len(self.spreads))
            self.needed = iterations_to_time(rms, TIMING_PRECISION)
            if self.most_s:  # the pace is per_iteration_time's: the kept gaps' mean
                self.needed = max(1, min(self.needed, math.floor(self.most_s / gaps.mean())))

    def iterations(self) -> int | None:
        """The iterations that time a random setting within :data:`TIMING_PRECISION`; None while the job runs
        no random setting, or before any segment measured its spread."""
        return self.needed if self.random else None
