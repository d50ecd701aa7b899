"""The job's ETA and its progress display, kept by the monitor thread beside the training.

A failing estimator plug-in costs the ETA, with its reason shown; a failing
display (a closed stdout) is dropped. Neither stops the job.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Callable

from tfonline._recorder import Recorder
from tfonline._state import TrainingState
from tfonline.estimator._prior import Priors, earlier_runs
from tfonline.exceptions import essence
from tfonline.progress import Status, Ticker, make_view
from tfonline.setting import short_form

logger = logging.getLogger("tfonline")

ESTIMATE_INTERVAL_S = 1.0
ESTIMATE_SHARE = 0.02  # at most this share of the monitor thread's time goes to estimates


def prior_for(repo, job_id: str, name: str, target_loss: float, estimator: str | None,
              mode: str | None = None) -> Priors | None:
    """The priors of the converged runs of job ``name`` to ``target_loss`` in ``repo``, but ``job_id``'s own, with
    the answers ``estimator`` gave them, for a run in ``mode`` (:class:`~tfonline.estimator._prior.Priors`); None
    with too few, or when the repository cannot say (logged: the ETA goes on from the curve alone)."""
    try:
        return Priors.of(earlier_runs(repo, name, target_loss, estimator, exclude=job_id), mode)
    except Exception as e:  # noqa: BLE001 (a helper's failure costs the prior, not the job)
        logger.warning("the ETA goes on without the job's earlier runs: %s: %s", type(e).__name__, essence(str(e)))
        return None


class Progress:
    """Estimates the time left (``estimator``, a :class:`tfonline.estimator.BaseEstimator` or None) and
    shows the job's progress, unless ``quiet``.

    ``workers`` says how many workers the current setting has: an estimate
    waits for at least 3 new iterations per worker. ``prior``: what the
    job's earlier converged runs say of its iterations
    (:class:`tfonline.estimator._prior.Priors`, :func:`prior_for`), that
    of the current worker count taken with each of the estimator's answers;
    None without. ``answered``, when set (:meth:`inform`), is called with the step and the
    iterations left of each answer that took the earlier runs (the tuner's
    :meth:`~tfonline.tuner.history.JobHistory.eta_answered`); a failure
    there is logged and stops those calls, not the ETA.
    """

    def __init__(self, job, state: TrainingState, recorder: Recorder, estimator, workers: Callable[[], int],
                 started: float, prior: Priors | None = None):
        self.job, self.state, self.recorder, self.estimator, self.prior = job, state, recorder, estimator, prior
        self.workers, self.started = workers, started
        self.last: tuple[float | None, float | None, str | None] = (None, None, "no estimate yet")
        self._failed = False
        self._next_at = 0.0
        self._last_step = 0
        self._ticker = Ticker(None)
        self._first_loss: float | None = None
        self._prior = None if prior is None else prior.pooled  # the one the latest answer took
        self.answered: Callable[[float, float], None] | None = None

    def inform(self, manager) -> None:
        """Gives ``manager``'s job history (a tuner's; a schedule has none) each answer that took the earlier runs."""
        self.answered = getattr(getattr(manager, "history", None), "eta_answered", None)

    def show(self, quiet: bool) -> None:
        """Starts the display (nothing when quiet or when it cannot be made)."""
        try:
            self._ticker = Ticker(make_view(quiet))
        except Exception as e:
            logger.debug("no progress display: %s", e)

    def tick(self) -> None:
        """Called by the monitor loop: a new estimate and a redraw, each when due."""
        if self.estimator is not None and not self._failed and time.monotonic() >= self._next_at:
            self.estimate()
        if self._ticker.due():
            try:
                self._ticker.view.update(self.status())
            except Exception as e:  # a closed stdout: the job goes on quietly
                logger.debug("progress display dropped: %s", e)
                self._ticker = Ticker(None)

    def close(self) -> None:
        """The last status, and a terminal left as it was."""
        view, self._ticker = self._ticker.view, Ticker(None)
        if view is not None:
            with contextlib.suppress(Exception):  # a display that fails leaves the job alone
                view.close(self.status())

    def estimate(self) -> None:
        """Fits the estimator on the current segment and records its estimate.

        After at least 3 new iterations per worker, and at most once every
        ``ESTIMATE_INTERVAL_S``, or less often when the fit's CPU time would
        be more than ``ESTIMATE_SHARE`` of the time between two: a fit reads
        the whole job, and the monitor shares the driver with the workers'
        threads.
        """
        started, cpu = time.monotonic(), time.thread_time()
        self._next_at = started + ESTIMATE_INTERVAL_S
        try:
            self._estimate()
        finally:
            self._next_at = started + max(ESTIMATE_INTERVAL_S, (time.thread_time() - cpu) / ESTIMATE_SHARE)

    def _estimate(self) -> None:
        (steps, losses, walls), (earlier_steps, earlier_losses, _), current, ready = self.state.snapshot()
        if not ready or steps.size < 2 or steps[-1] - self._last_step < 3 * self.workers():
            return
        self._last_step = steps[-1]
        earlier = (earlier_steps, earlier_losses) if earlier_steps.size else None
        try:
            self.estimator.fit(steps, losses, start_step=steps[0] - 1, start_loss=losses[0], history=earlier)
            curve = self.estimator.iterations_to_cross(current, self.job.target_loss, self.job.smoothing_window)
            curve = None if curve is None else float(curve)
            if self.prior is not None:
                self._prior = self.prior.at(self.workers())
            remaining = curve if self._prior is None else self._prior.combine(float(steps[-1]), curve)
        except Exception as e:  # a plug-in's bug costs the ETA, not the job
            self._failed = True
            reason = f"the estimator {self.estimator.name!r} failed: {type(e).__name__}: {essence(str(e))}"
            logger.warning("%s; the job goes on without an ETA", reason)
            self.last = (None, None, reason)
            return
        per_iteration_s = (walls[-1] - walls[0]) / (steps[-1] - steps[0])
        remaining_s = None if remaining is None else remaining * per_iteration_s
        self.last = (remaining, remaining_s, None if remaining is not None else self.estimator.reason)
        self.recorder.estimate(step=int(steps[-1]), estimator=self.estimator.name, loss=current,
                               remaining_iterations=remaining, remaining_s=remaining_s, curve_iterations=curve,
                               prior_runs=self._prior.runs if self._prior is not None else 0)
        if self.answered is not None and self._prior is not None and remaining is not None:
            try:
                self.answered(float(steps[-1]), remaining)
            except Exception as e:  # noqa: BLE001 (the tuner's loss, not the ETA's)
                logger.warning("the tuner no longer reads the ETA: %s: %s", type(e).__name__, essence(str(e)))
                self.answered = None

    def source(self) -> str | None:
        """What the ETA comes from, as the display names it: the estimator, and the earlier runs it took."""
        if self.estimator is None:
            return None
        return self.estimator.name + (f" + {self._prior.label()}" if self._prior is not None else "")

    def status(self) -> Status:
        """What the progress display shows now."""
        walls, step, loss = self.state.recent()
        pace = (walls[-1] - walls[0]) / (walls.size - 1) if walls.size > 1 else None
        remaining, remaining_s, reason = self.last
        if self._first_loss is None:
            self._first_loss = loss
        return Status(self.job.name, step, loss, float(self.job.target_loss), short_form(self.state.setting),
                      self.state.phase, pace, remaining_s, remaining, self.source(),
                      reason, time.monotonic() - self.started, self._first_loss)
