"""The tuning loop's budgets: what exploring may spend (and has spent), and what its decisions may take."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from tfonline.setting import setting_key


def latest_own(triples: Sequence):
    """The latest usable triple of this job's own (None before one): its R̂ is the job's estimated time left."""
    return next((t for t in reversed(triples) if t.usable and t.source is None), None)


def best_time(triples: Sequence) -> float | None:
    """The lowest mean time per iteration of any setting the triples saw (each setting's mean over its
    segments), this workload's only (another's times are on its own scale): what an exploring segment is
    charged against."""
    times: dict[str, list[float]] = {}
    for t in triples:
        if t.per_iteration_s is not None and t.distance == 0:
            times.setdefault(setting_key(t.setting), []).append(t.per_iteration_s)
    return min((float(np.mean(v)) for v in times.values()), default=None)


class ExplorationBudget:
    """Exploring (random settings, and online switches made on EI alone) may spend ``fraction`` of the job's
    estimated length; None: no budget.

    The length is the job's time so far + the latest R̂, re-estimated at
    every decision (:meth:`left`). The spending is every exploring switch's
    measured cost plus the time its segment lost (or won: a credit) against
    the best setting seen before it. An estimator that is low early
    (hogwild's R̂ was 3-5× low on LogR after the initial phase) allows
    little at first; as the job outlives its estimate, its time so far makes
    up for it. One that is high early allows too much (the CNN benchmark's
    first R̂ gave a 60-s job 75 s). The charge misses the way back, the
    iterations trained while the next switch is prepared, and the warm-up
    (NOTES.md, 2026-11-24).
    """

    def __init__(self, fraction: float | None):
        self.fraction = fraction
        self.spent_s = 0.0
        self._charge_switch = False  # the switch being applied explores: its cost is charged
        self._reference: float | None = None  # the per-iteration time an exploring segment is measured against

    def left(self, estimated_length_s: float) -> float | None:
        """Seconds the job may still spend exploring; None without a budget."""
        if self.fraction is None:
            return None
        return max(0.0, self.fraction * estimated_length_s - self.spent_s)

    def explore(self, reference_per_iteration_s: float | None) -> None:
        """The switch being decided explores: its cost, and its segment's time against ``reference``, are charged."""
        self._charge_switch = True
        self._reference = reference_per_iteration_s

    def segment_ended(self, per_iteration_s: float | None, timed_iterations: int) -> None:
        """After a segment: if it explored, the time it lost against the reference (negative when it found a
        faster setting: an exploration that pays for itself leaves budget for the next)."""
        reference, self._reference = self._reference, None
        if reference is not None and per_iteration_s is not None:
            self.spent_s += timed_iterations * (per_iteration_s - reference)

    def switch_made(self, cost_s: float | None) -> None:
        """The measured cost of the switch just made (None: not measured), charged if it explored."""
        if self._charge_switch and cost_s is not None:
            self.spent_s += cost_s
        self._charge_switch = False


# What a decision that fits the GP is taken to cost before one has: about what the first fits cost on the
# benchmark's LogR jobs and at the paper's scale, simulated (0.5-1 s of CPU).
FIRST_FIT_S = 0.5
# A refit is wanted once the observations have grown this many times since the latest fit.
REFIT_GROWTH = 1.5


class OverheadBudget:
    """The tuner's decisions may take ``share`` of the job: its thread's CPU time so far, against the job's
    elapsed time; None: no limit.

    Nearly all of a decision's cost is fitting the GP's hyperparameters
    (0.6-2.4 s of CPU on the sweep benchmark's CNN jobs, against 0.1-0.2 s
    for conditioning the GP and maximising EI), so a decision refits them
    only when the share pays for it (:meth:`refit_due`), and a segment lasts
    until the tuner's time so far is back within the share
    (:meth:`segment_seconds`). As the decisions that take the latest fit
    spend the slack their segments make, a segment also holds back a fit's
    cost once the observations have grown :data:`REFIT_GROWTH` times since
    that fit (:meth:`refit_wanted`).
    """

    def __init__(self, share: float | None):
        self.share = share
        self.spent_s = 0.0
        self.fit_cost_s: float | None = None  # the CPU time of the latest decision that fitted the GP
        self.fitted_observations: int | None = None  # the observations the latest fit saw
        self.reserve_s = 0.0  # what the next segment holds back for a refit (refit_wanted)

    def decided(self, overhead_s: float, refitted: bool, observations: int | None = None) -> None:
        """A decision took ``overhead_s`` of CPU; ``refitted``: it fitted the GP's hyperparameters, on
        ``observations``. The next segment then holds back a fit's cost when one is wanted
        (:meth:`refit_wanted`)."""
        self.spent_s += overhead_s
        if refitted:
            self.fit_cost_s, self.fitted_observations = overhead_s, observations
        wanted = observations is not None and self.refit_wanted(observations)
        self.reserve_s = self.fit_cost_s if wanted and self.fit_cost_s is not None else 0.0

    def adopted(self, fit_cost_s: float, observations: int) -> None:
        """The job starts from an earlier job's fit, which cost ``fit_cost_s`` and saw at most the
        ``observations`` the job inherits: a refit is wanted once the job's own have grown them half again (a
        resumed CNN benchmark job never refitted: NOTES.md, forty-fourth session)."""
        self.fit_cost_s, self.fitted_observations = fit_cost_s, observations

    def refit_wanted(self, observations: int) -> bool:
        """Whether the observations have grown :data:`REFIT_GROWTH` times since the latest fit. Without a
        reserve the share never pays for a refit: each decision that takes the latest fit spends the slack its
        segment made, and a tuned CNN job took its one fit, of 6 observations, for 179 decisions (NOTES.md,
        forty-third session)."""
        return self.fitted_observations is not None and observations >= REFIT_GROWTH * self.fitted_observations

    def segment_seconds(self, least_s: float, elapsed_s: float, pending_s: float = 0.0) -> float:
        """How long the segment that begins after a decision at ``elapsed_s`` lasts at least: ``least_s``, and
        until the tuner's time so far (and ``pending_s``, the CPU of a decision still being taken, and the
        reserve for a refit once one is wanted) is within the share of the job's."""
        return least_s if self.share is None else max(
            least_s, (self.spent_s + pending_s + self.reserve_s) / self.share - elapsed_s)

    def affords_fit(self, elapsed_s: float) -> bool:
        """Whether the share of the job so far pays for the tuner's time so far and one more decision that fits
        the GP, at the latest fit's cost (:data:`FIRST_FIT_S` before any): for what the tuner may leave
        undone, such as pricing a random draw by the GP. Unlike :meth:`refit_due` it holds back the first
        fit, which on a job of seconds would stretch the next segment to tens of seconds."""
        if self.share is None:
            return True
        cost = FIRST_FIT_S if self.fit_cost_s is None else self.fit_cost_s
        return self.spent_s + cost <= self.share * elapsed_s

    def first_fit_waits(self, elapsed_s: float) -> bool:
        """Whether no decision of this job has fitted the GP yet and the share does not pay for one
        (:meth:`affords_fit`). A random phase that waits for the exploration budget makes its first fit no
        sooner: a LogR benchmark job's waiting decision fitted it 2.4 s in (0.48 s of CPU), and the share then
        held the job 20 s on one setting."""
        return self.fit_cost_s is None and not self.affords_fit(elapsed_s)

    def refit_due(self, elapsed_s: float) -> bool:
        """Whether a decision at ``elapsed_s`` fits the GP's hyperparameters (else it takes the latest fit's):
        always without a share and for the first fit; then when the share of the job so far pays for the
        tuner's time so far and one more decision that fits, at the cost of the latest one."""
        if self.share is None or self.fit_cost_s is None:
            return True
        return self.spent_s + self.fit_cost_s <= self.share * elapsed_s
