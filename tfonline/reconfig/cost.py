"""What a switch cost the job: the measure every reconfiguration records and the tuner learns from."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from tfonline.timing import per_iteration_time


def switch_cost(points: Sequence[tuple[int, float, float]], workers: int, from_step: int, from_wall: float,
                old_pace: float | None) -> tuple[float, int]:
    """The time a switch lost the job, and the iterations the old setting trained while it was made.

    ``points`` are the new setting's first iterations, ``(step, loss, wall
    time)`` in order; ``workers`` is how many iterations make one round
    of its workers (1 in sync mode). The switch began after step
    ``from_step``, which ended at ``from_wall``; ``old_pace`` is the old
    setting's seconds per iteration (None when unknown).

    The span runs from ``from_wall`` to the end of the new setting's
    ``workers``-th iteration: each worker's first step, which creates
    moved partitions and registers the new graphs, is in it. From it goes
    the time the iterations completed in the span would take at their
    setting's pace: the old setting's (those a live switch let its workers
    train while it was made, returned as the second value; 0 when they
    paused) at ``old_pace``, the new ones at the new setting's pace,
    measured on the iterations after them (the old pace when too few are
    in). Paused or live, it is the time the job would have saved had the
    new setting simply been running. Never below 0.
    """
    if not points:
        raise ValueError("a switch's cost needs the new setting's first iteration")
    first = points[:workers]
    steady = per_iteration_time(np.array([wall for _, _, wall in points], dtype=float), len(first) - 1)
    new_pace = steady if steady is not None else old_pace
    during = first[-1][0] - from_step - len(first)
    span = first[-1][2] - from_wall
    return max(0.0, span - during * (old_pace or 0.0) - len(first) * (new_pace or 0.0)), during
