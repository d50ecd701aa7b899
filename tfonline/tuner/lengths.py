"""How long a tuned job's segment runs: its iterations, and the least seconds it lasts.

The rules are the tuning loop's (:mod:`tfonline.tuner.manager`, "A segment
lasts"); they are kept here, apart from the decisions, because a driver asks
for them at every check of its loop and the decisions only change them.
"""

from __future__ import annotations

from tfonline.timing import Timing
from tfonline.tuner.budget import OverheadBudget

# How many times longer than the first an online segment may grow while the
# tuner keeps deciding to stay.
MAX_STRETCH = 8


class SegmentLengths:
    """The current segment's length: ``initial_iterations`` for the first; then ``segment_iterations`` (None:
    3 × the setting's workers) and at least ``min_segment_s`` seconds, both times the stretch; a random setting's
    segment, once timing is possible, the iterations that time it (:class:`~tfonline.timing.Timing`, at most
    ``min_segment_s`` at the latest pace) and no least seconds. Every segment but a random setting's also lasts
    until the tuner's time so far is within its share (:class:`~tfonline.tuner.budget.OverheadBudget`)."""

    def __init__(self, initial_iterations: int, segment_iterations: int | None, min_segment_s: float,
                 overhead: OverheadBudget):
        self.initial_iterations = initial_iterations
        self.segment_iterations = segment_iterations
        self.min_segment_s = float(min_segment_s)
        self.overhead = overhead
        self.stretch = 1
        self.timing = Timing(most_s=self.min_segment_s)  # a random setting's segment (timing.random: one runs)
        self.unmeasured = False  # the current setting has no timed segment in this job yet

    def iterations(self, phase: str, workers: int) -> int:
        """Iterations the current segment should run, in ``phase``, on a setting of ``workers``."""
        if phase == "initial":
            return self.initial_iterations
        length = self.stretch * self.base(workers)
        return max(length, self.timing.iterations() or 0)

    def base(self, workers: int) -> int:
        """A segment's iterations on a setting of ``workers``, before any stretch: ``segment_iterations``, or 3 ×
        the workers (the paper's I)."""
        return self.segment_iterations or 3 * int(workers)

    def seconds(self, elapsed_s: float) -> float:
        """The least duration of the current segment, ``elapsed_s`` into the job. A random setting's is not
        stretched for the overhead's share: the setting was drawn, not chosen, and each second on it may be a
        second lost (a tuned CNN job ran a random setting 54 s, a fifth of the job, after a first GP fit that
        took 1.7 s of CPU, not the 0.5 s guessed); the decisions that follow fit the GP only once the share
        pays for it (:meth:`~tfonline.tuner.budget.OverheadBudget.affords_fit`). Nor is the first segment of a
        setting the GP chose but no segment of this job has timed (``unmeasured``): it measures a prediction,
        and the next decision leaves it if the GP was wrong (a tuned CNN job's first exploit, of a setting
        predicted 1,210 s sooner, ran 76 s at 1.5x the time per iteration of the best seen before the share let
        that decision come). The segments after either are stretched as much as the share then asks."""
        least = self.stretch * self.min_segment_s if self.timing.iterations() is None else 0.0
        return least if self.timing.random or self.unmeasured else self.overhead.segment_seconds(least, elapsed_s)

    def decided(self, switch: bool, settled: bool = True) -> None:
        """A decision was taken: a switch starts the stretch over, staying doubles it (up to :data:`MAX_STRETCH`)
        when ``settled``. A stay that only waits for the setting the GP prefers to stop being one the job left
        recently keeps it: on the LogR benchmark (2026-11-27) a job that explored a layout stayed on it four
        decisions, two of them blocked so, and ran its last segment there 6,430 iterations (16 s, a fifth of
        the job) at 0.0025 s per iteration; the ps1 w3 settings it went on to ran 0.0016-0.0023."""
        if switch:
            self.stretch = 1
        elif settled:
            self.stretch = min(2 * self.stretch, MAX_STRETCH)
