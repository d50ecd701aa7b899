"""How good an estimator is, measured on completed fixed-setting runs (paper §VI-D).

Never imports TensorFlow: it reads the repository only.

- **Oracle.** Each completed (converged) run of the job is one setting; the
  oracle ranks them by training time, from the first iteration to the last
  (cluster start-up excluded: it does not depend on the setting), 1 = fastest.
- **Rank metric.** Every run is cut into segments of ``segment`` iterations.
  For segment index m, each run that still has that segment is fitted on
  it, and its remaining time is predicted as remaining iterations × the
  segment's wall time per iteration. The run with the least predicted time
  is the estimator's pick for m. Each fit also gets the run's iterations
  before the segment as history (the built-ins take the curve's shape
  from it). The metric is the mean oracle rank of the
  picks over all m where at least two runs answered (1.0 is perfect).
- **Relative error.** At 25%, 50% and 75% of each run, the estimator is
  fitted on the ``segment`` iterations before that point, and its remaining
  iterations until the smoothed loss crosses the target
  (:meth:`~tfonline.estimator.BaseEstimator.iterations_to_cross`, with the
  run's smoothing window read off its recorded losses) are compared with
  the run's actual remaining iterations: ``|predicted − actual| / actual``.
  The median over runs is reported, with how many runs gave no estimate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from tfonline.estimator import get_estimator
from tfonline.estimator._prior import EarlierRun, Priors, earlier_runs
from tfonline.exceptions import ConfigurationError
from tfonline.repository import Repository

FRACTIONS = (0.25, 0.5, 0.75)


@dataclass
class Run:
    job_id: str
    setting: str
    target_loss: float
    steps: np.ndarray
    losses: np.ndarray
    smoothed: np.ndarray
    walls: np.ndarray
    name: str | None = None  # the job's name and start: where its earlier runs are found (:func:`eta_errors`)
    started_at: float | None = None

    @property
    def training_time_s(self) -> float:
        return float(self.walls[-1] - self.walls[0])

    @cached_property  # read once per run: every estimate of the run needs it
    def smoothing_window(self) -> int | None:
        """The window of the run's smoothed loss, an exponential average of weight a = 2 / (window + 1):
        a is the least-squares solution of s_k − s_(k−1) = a·(l_k − s_(k−1)) over the run's second half,
        where the average's start-up correction has long faded. None for a run too short to tell, or whose
        smoothed losses do not follow that recursion (to a thousandth)."""
        half = self.losses.size // 2
        if half < 10:
            return None
        before = self.smoothed[half - 1:-1]
        x, y = self.losses[half:] - before, self.smoothed[half:] - before
        usable = np.isfinite(x) & np.isfinite(y)
        denominator = float(np.dot(x[usable], x[usable]))
        if denominator <= 0:
            return None
        a = float(np.dot(x[usable], y[usable])) / denominator
        misfit = float(np.linalg.norm(y[usable] - a * x[usable]))
        if not 0 < a <= 1 or misfit > 1e-3 * float(np.linalg.norm(y[usable])):
            return None
        return max(1, round(2.0 / a - 1.0))


@dataclass
class Quality:
    estimator: str
    runs: int
    rank: float | None
    picks: int
    median_relative_error: dict[float, float | None] = field(default_factory=dict)
    unavailable: dict[float, int] = field(default_factory=dict)


def load_runs(repo: Repository, job_name: str) -> list[Run]:
    """The converged runs named ``job_name``, with their iterations."""
    return [run for run in (_load(repo, job) for job in repo.jobs(job_name)) if run is not None]


def load_run(repo: Repository, job_id: str) -> Run | None:
    """The job ``job_id`` with its iterations, if it converged (else None)."""
    return next((run for run in (_load(repo, job) for job in repo.jobs(job_id)) if run is not None), None)


def _load(repo: Repository, job: dict) -> Run | None:
    if job["status"] != "converged":
        return None
    rows = list(repo.rows(
        "select i.step, i.loss, i.smoothed_loss, i.wall_time, s.short from iterations i "
        "left join settings s on s.id = i.setting_id where i.job_id = ? order by i.step", (job["id"],)))
    if len(rows) < 2:
        return None
    data = np.array([(r["step"], r["loss"], r["smoothed_loss"], r["wall_time"]) for r in rows], dtype=float)
    return Run(job["id"], rows[0]["short"] or "", job["target_loss"], *data.T, name=job["name"],
               started_at=job["started_at"])


def _predict(estimator, run: Run, lo: int, hi: int) -> tuple[float | None, float]:
    """Fits on iterations [lo, hi) of ``run``; returns (remaining iterations, s per iteration)."""
    est = estimator.fit(run.steps[lo:hi], run.losses[lo:hi], start_step=run.steps[lo] - 1,
                        start_loss=run.losses[lo], history=(run.steps[:lo], run.losses[:lo]))
    remaining = est.iterations_to_cross(float(run.smoothed[hi - 1]), run.target_loss, run.smoothing_window)
    per_iteration_s = float(run.walls[hi - 1] - run.walls[lo]) / max(1.0, float(run.steps[hi - 1] - run.steps[lo]))
    return remaining, per_iteration_s


@dataclass
class RunRating:
    """One run's part of an estimator's rating, which :func:`combine` puts together with the other runs':
    the run's training time (the oracle's), its predicted remaining time at each segment (None: no
    estimate there), and its relative error at each of :data:`FRACTIONS` (None: no estimate). A benchmark
    keeps it when the run ends, so that the rating needs no run's iterations afterwards."""

    training_time_s: float
    segment: int
    predicted_s: list[float | None]
    relative_error: dict[float, float | None]


def rate_run(run: Run, estimator, segment: int) -> RunRating:
    """What ``estimator`` (an estimator object, :func:`~tfonline.estimator.get_estimator`) predicts of ``run``
    in segments of ``segment`` iterations, and how far it is off at each of :data:`FRACTIONS`."""
    predicted = []
    for m in range(run.steps.size // segment):
        remaining, per_iteration_s = _predict(estimator, run, m * segment, (m + 1) * segment)
        predicted.append(None if remaining is None else remaining * per_iteration_s)
    return RunRating(run.training_time_s, segment, predicted, relative_errors(run, estimator, segment))


def relative_errors(run: Run, estimator, segment: int) -> dict[float, float | None]:
    """At each of :data:`FRACTIONS` of ``run``: ``|predicted − actual| / actual`` of its remaining iterations,
    the estimator fitted on the ``segment`` iterations before (None: no estimate there). (The ETA's, which takes
    the job's earlier runs, is read from what the run recorded: :func:`eta_errors`.)"""
    errors: dict[float, float | None] = {}
    for fraction in FRACTIONS:
        cut = int(run.steps.size * fraction)
        lo = max(0, cut - segment)
        remaining = _predict(estimator, run, lo, cut)[0] if cut - lo >= 2 else None
        actual = run.steps.size - cut
        errors[fraction] = None if remaining is None or actual <= 0 else abs(remaining - actual) / actual
    return errors


def combine(estimator_name: str, ratings: list[RunRating]) -> Quality:
    """The rank metric and relative errors of one estimator over the runs that ``ratings`` rated (one segment)."""
    segments = sorted({r.segment for r in ratings})
    if len(segments) > 1:
        raise ConfigurationError(f"ratings to combine must share one segment length, got {segments}")
    order = sorted(range(len(ratings)), key=lambda i: ratings[i].training_time_s)
    oracle_rank = {run_index: rank + 1 for rank, run_index in enumerate(order)}
    ranks = []
    for m in range(max((len(r.predicted_s) for r in ratings), default=0)):
        predictions = {i: r.predicted_s[m] for i, r in enumerate(ratings)
                       if m < len(r.predicted_s) and r.predicted_s[m] is not None}
        if len(predictions) >= 2:
            ranks.append(oracle_rank[min(predictions, key=predictions.get)])
    quality = Quality(estimator_name, len(ratings), float(np.mean(ranks)) if ranks else None, len(ranks))
    for fraction in FRACTIONS:
        errors = [r.relative_error[fraction] for r in ratings if r.relative_error[fraction] is not None]
        quality.median_relative_error[fraction] = float(np.median(errors)) if errors else None
        quality.unavailable[fraction] = len(ratings) - len(errors)
    return quality


def estimate_quality(runs: list[Run], estimator_name: str, segment: int, **options) -> Quality:
    """The rank metric and relative errors of one estimator over ``runs``."""
    if len(runs) < 2:
        raise ConfigurationError(f"estimate-quality needs at least 2 converged runs of the job, got {len(runs)}")
    if isinstance(segment, bool) or not isinstance(segment, int) or segment < 2:
        raise ConfigurationError(f"segment must be an integer >= 2, got {segment!r}")
    estimator = get_estimator(estimator_name, **options)
    return combine(estimator_name, [rate_run(run, estimator, segment) for run in runs])


def eta_errors(repo: Repository, run: Run, estimator_name: str, every: list[EarlierRun] | None = None) -> dict:
    """The ETA of ``run`` as it ran, read back: at each of :data:`FRACTIONS` of its iterations, the last answer
    ``estimator_name`` recorded there (the ``estimates`` table), alone and taken with the prior of the runs of the
    job that converged before it on the workers it then ran (:class:`~tfonline.estimator._prior.Priors`), as the
    ETA takes it; each as ``|predicted − actual| / actual``
    of the iterations left (None: no answer recorded by then); ``every``: the job's converged runs with their
    answers (:func:`~tfonline.estimator._prior.earlier_runs` of its name and target, oldest first), where the
    caller has read them (one read for all the runs it rates). Unlike :func:`relative_errors`, no fit is made
    again: the earlier runs' recorded answers calibrate this run's recorded answers, which came from the same
    fits (answers fitted again, on 60-iteration segments, they do not calibrate). Returns ``{"earlier_runs",
    "relative_error", "recorded_error"}`` (the job's earlier runs; the ETA's errors, and the answers' alone)."""
    if every is None:
        every = earlier_runs(repo, run.name, run.target_loss, estimator_name)
    own = next((r for r in every if r.job_id == run.job_id), None)
    priors = Priors.of([r for r in every if r.job_id != run.job_id and r.started_at is not None
                        and run.started_at is not None and r.started_at < run.started_at],
                       own.mode if own is not None else None)
    eta, alone = {}, {}
    for fraction in FRACTIONS:
        said = [] if own is None else [(k, c) for k, c in zip(own.steps, own.curve)
                                       if k <= fraction * own.iterations and k < own.iterations]
        if not said:
            eta[fraction] = alone[fraction] = None
            continue
        k, answer = said[-1]
        actual = own.iterations - k
        alone[fraction] = abs(answer - actual) / actual
        prior = None if priors is None else priors.at(own.workers_at(k))  # of the setting it then ran
        eta[fraction] = alone[fraction] if prior is None else abs(prior.combine(k, answer) - actual) / actual
    return {"earlier_runs": priors.pooled.runs if priors else 0, "relative_error": eta, "recorded_error": alone}


def eta_quality(repo: Repository, runs: list[Run], estimator_name: str, segment: int) -> tuple[Quality, Quality]:
    """The ETA a job showed with ``estimator_name`` (:func:`eta_errors`), over ``runs``: its median errors, and
    those of the answers it recorded alone (no rank). ``picks`` counts the runs that had earlier runs."""
    every: dict[float, list[EarlierRun]] = {}  # by target: a job's runs are read once, not once a run
    for run in runs:
        if run.target_loss not in every:
            every[run.target_loss] = earlier_runs(repo, run.name, run.target_loss, estimator_name)
    rated = [eta_errors(repo, run, estimator_name, every[run.target_loss]) for run in runs]
    qualities = []
    for key, name in (("relative_error", f"{estimator_name} with the job's earlier runs"),
                      ("recorded_error", f"{estimator_name}'s recorded answers alone")):
        q = combine(name, [RunRating(run.training_time_s, segment, [], r[key]) for run, r in zip(runs, rated)])
        q.picks = sum(r["earlier_runs"] > 0 for r in rated)
        qualities.append(q)
    return qualities[0], qualities[1]


def quality_text(qualities: list[Quality], job_name: str, segment: int,
                 etas: list[tuple[Quality, Quality]] = ()) -> str:
    runs = qualities[0].runs
    lines = [f"estimator quality for {job_name}: {runs} converged runs, segments of {segment} iterations",
             f"  {'estimator':<12} {'rank (of ' + str(runs) + ')':>12} {'picks':>6}   median relative error "
             f"of remaining iterations at 25% / 50% / 75% (runs without an estimate)"]
    for q in qualities:
        rank = "-" if q.rank is None else f"{q.rank:.2f}"
        errors = " / ".join(
            ("-" if q.median_relative_error[f] is None else f"{q.median_relative_error[f]:.2f}")
            + f" ({q.unavailable[f]})" for f in FRACTIONS)
        lines.append(f"  {q.estimator:<12} {rank:>12} {q.picks:>6}   {errors}")
    def medians(q: Quality) -> str:
        return " / ".join("-" if q.median_relative_error[f] is None else f"{q.median_relative_error[f]:.2f}"
                          for f in FRACTIONS)

    for eta, alone in etas:
        lines.append(f"  the ETA as the runs showed it, {eta.estimator}: {medians(eta)} ({alone.estimator}: "
                     f"{medians(alone)}; {eta.picks} of {eta.runs} runs had 2 or more before them)")
    return "\n".join(lines)
