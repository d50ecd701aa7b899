"""Time per iteration, measured the one way the tuner, the switch cost and the report share."""

from __future__ import annotations

import numpy as np

# Tukey's far-out fence: a gap between iterations above Q3 + TUKEY_K * IQR is a stall, not the setting's pace.
TUKEY_K = 3.0


def per_iteration_time(walls: np.ndarray, warmup: int) -> float | None:
    """Mean wall time per iteration after the warm-up, gaps beyond Tukey's far-out fence left out.

    A gap between consecutive iterations above Q3 + 3·IQR (a stall of the
    machine, a garbage collection) is an outlier of the timing, not of the
    setting. Needs at least 3 iterations after the warm-up.
    """
    walls = np.asarray(walls, dtype=float)[warmup:]
    if walls.size < 3:
        return None
    gaps = np.diff(walls)
    q1, q3 = np.percentile(gaps, [25, 75])
    kept = gaps[gaps <= q3 + TUKEY_K * (q3 - q1)]
    return float(kept.mean()) if kept.size else float(gaps.mean())
