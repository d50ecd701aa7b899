"""What a job's earlier runs say about the iterations it has left: the ETA's prior.

A job is rarely run once. Its earlier runs on the same repository, of the
same name and to the same target loss, each needed some number of
iterations to converge, and how many a new run needs is much like theirs:
on the benchmark's LogR the iterations to the target spread 18% over four
seeds of one setting, and a predictor that knew their mean was off by
9 / 13 / 27% of the iterations left at 25 / 50 / 75% of each run, where the
loss's curve alone was off by 24 / 22 / 18% (NOTES.md, thirty-eighth
session). The earlier runs also show how far the curve's answers were off
on this job, and which way: on the full benchmark's CNN they said 2.6x and
4.2x too many iterations at 50% and 75% of its runs, every run alike
(NOTES.md, fiftieth session). The ETA takes all of it
(:meth:`IterationsPrior.combine`), by a plug-in rule:

- **The prior.** The earlier runs' iterations to the target are taken as
  log-normal: ``log N ~ Normal(m, s)``, m and s the mean and standard
  deviation of their logs (s at least :data:`MIN_LOG_SD`, and widened by
  ``sqrt(1 + 1/n)`` for n runs: the spread of a new draw, not of their
  mean). Given that this run has done k iterations and has not converged,
  N is that distribution above k, and the iterations left are N − k: their
  log's mean and standard deviation are read at :data:`QUANTILES`
  quantiles of N above k.
- **The curve, calibrated.** Each earlier run recorded the curve's answers
  as it went (the ``estimates`` table's ``curve_iterations``; before
  version 14, its ``remaining_iterations``); against the
  iterations it then had left, each is a log error at the run's fraction
  k/N. This run's fraction is read as k / (k + the answer's iterations
  left), starting from the prior's and for :data:`FRACTION_ROUNDS` rounds
  (the calibration at the fraction the answer implies: the CNN's bias grows
  through its runs), and the earlier runs' log errors within
  :data:`CALIBRATION_WIDTH` of it are averaged per run. With at least :data:`MIN_RUNS` runs there, the curve's
  answer is divided by the exponential of their mean (its bias on this
  job), and its error is their standard deviation (at least
  :data:`MIN_LOG_SD`, widened as above) pooled with :data:`CURVE_LOG_SD`
  as if that were the spread of :data:`PSEUDO_RUNS` runs more: two or
  three runs whose errors agree by chance say little of the next one's,
  and taken alone they let a wrong bias decide late in a run (the quick
  benchmark's LogR at 75%: 0.46 with their spread alone, 0.24 pooled). Without, the answer stands and is
  taken to be off by a factor of ``exp(CURVE_LOG_SD)`` one time in about
  three either way (:data:`CURVE_LOG_SD`, a design choice).
- **Together**, the two logs are averaged, each weighted by its inverse
  variance. Early in a run the prior is the sharper (its spread is that of
  N, small against N − k); late, the iterations left are a small
  difference of large numbers, the prior's log spread grows, and the
  calibrated curve decides.

There is no prior with fewer than :data:`MIN_RUNS` earlier converged runs,
or when this run has gone past all but :data:`OUTLIVED` of the
distribution (it is not like the earlier ones): the curve's answer stands.
Where the curve has no answer (no decrease seen yet), the prior's median
is the estimate. A curve that says 0 (the target reached) is kept.

**The layout.** Where the setting moves the iterations, the earlier runs
of another setting tell a run another setting's length: the CNN's
asynchronous workers needed 4,111-4,393 iterations on one or two workers
and 6,292-7,044 on three (quick benchmark, 2026-12-02). So the prior is
of the earlier runs of the job's mode whose worker count is the current
setting's (a run's worker count: that of the setting it ran most
iterations on) where there are at least :data:`MIN_RUNS` of them, and of
all the earlier runs otherwise (:class:`Priors`); a tuned job takes the
prior of the setting it is on at each answer. The curve's calibration is
that of all the earlier runs whichever prior is taken: it is the
estimator's error on this job, and calibrated on fewer runs it was worse
at 75% of the benchmark's runs. README "Progress estimators" has the
measured errors.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from statistics import NormalDist
from typing import Sequence

import numpy as np

MIN_RUNS = 2  # earlier converged runs a prior (and a calibration of the curve) needs
MIN_LOG_SD = 0.05  # two runs of one seed and setting need the same iterations: no certainty follows from it
CURVE_LOG_SD = math.log(1.5)  # the curve's error where the earlier runs cannot tell it
CALIBRATION_WIDTH = 0.1  # the earlier runs' answers within this much of this run's fraction calibrate the curve
PSEUDO_RUNS = MIN_RUNS  # the runs' worth of CURVE_LOG_SD pooled into the curve's calibrated error
FRACTION_ROUNDS = 4  # rounds of reading the calibration at the fraction the answer before it implies
QUANTILES = 64  # quantiles of N above k its iterations left are read at
OUTLIVED = 0.01  # the share of the prior above k under which this run has outlived it


@dataclass(frozen=True)
class EarlierRun:
    """An earlier converged run of the job: its ``iterations``, and the curve's answers it recorded: at each of
    ``steps``, ``curve`` iterations left (empty: none recorded); ``job_id`` and ``started_at``: the job read;
    ``mode`` its training mode, and ``layout``: from each of its segments' first step (ascending), the workers of
    its setting (empty: not known)."""

    iterations: int
    steps: np.ndarray = field(default_factory=lambda: np.empty(0))
    curve: np.ndarray = field(default_factory=lambda: np.empty(0))
    job_id: str | None = None
    started_at: float | None = None
    mode: str | None = None
    layout: tuple[tuple[int, int], ...] = ()

    @property
    def workers(self) -> int | None:
        """The worker count it ran the most iterations on (the fewer on a tie); None: not known."""
        ran: dict[int, int] = {}
        for (start, workers), (end, _) in zip(self.layout, self.layout[1:] + ((self.iterations, 0),)):
            ran[workers] = ran.get(workers, 0) + max(end - start, 0)
        return max(sorted(ran), key=lambda w: ran[w]) if ran else None

    def workers_at(self, step: float) -> int | None:
        """The workers of the setting it ran ``step`` on; None: not known."""
        at = [workers for start, workers in self.layout if start <= step]
        return at[-1] if at else (self.layout[0][1] if self.layout else None)

    def log_errors(self) -> tuple[np.ndarray, np.ndarray]:
        """Its fraction k/N at each usable answer (one with iterations really left, and above 0), and the
        answer's log error: log(answer / (N − k))."""
        steps, curve = np.asarray(self.steps, dtype=float), np.asarray(self.curve, dtype=float)
        left = self.iterations - steps
        usable = (left > 0) & np.isfinite(curve) & (curve > 0)
        return steps[usable] / self.iterations, np.log(curve[usable] / left[usable])


@dataclass(frozen=True)
class IterationsPrior:
    """The earlier runs' iterations to the target (``mean_log`` and ``sd_log`` of log N over ``runs`` runs), and
    the curve's log errors they recorded (``errors``: each run's fractions and log errors)."""

    runs: int
    mean_log: float
    sd_log: float
    errors: tuple[tuple[np.ndarray, np.ndarray], ...] = ()
    workers: int | None = None  # the worker count all its runs share (None: any)

    @classmethod
    def of(cls, earlier: Sequence[EarlierRun | int | float], workers: int | None = None) -> "IterationsPrior | None":
        """The prior from the earlier runs (an :class:`EarlierRun`, or a run's iterations alone), said to be of
        runs on ``workers`` workers (None: any); None with fewer than :data:`MIN_RUNS` (a run whose iterations are
        not a positive number is left out)."""
        runs = _usable(earlier)
        if len(runs) < MIN_RUNS:
            return None
        logs = np.log([float(r.iterations) for r in runs])
        errors = tuple(e for e in (r.log_errors() for r in runs) if e[0].size)
        return cls(len(runs), float(np.mean(logs)), _spread(logs), errors, workers)

    def label(self) -> str:
        """What it takes, as the display says it: "3 earlier runs", "3 earlier runs on 2 workers"."""
        on = "" if self.workers is None else f" on {self.workers} worker{'s' if self.workers != 1 else ''}"
        return f"{self.runs} earlier runs{on}"

    def left(self, done: float) -> tuple[float, float] | None:
        """The mean and standard deviation of log(N − ``done``) for N above ``done``; None when less than
        :data:`OUTLIVED` of the prior lies above it."""
        normal = NormalDist(self.mean_log, self.sd_log)
        below = normal.cdf(math.log(done)) if done > 0 else 0.0
        if 1.0 - below < OUTLIVED:
            return None
        q = below + (1.0 - below) * (np.arange(QUANTILES) + 0.5) / QUANTILES
        totals = np.exp([normal.inv_cdf(float(p)) for p in np.clip(q, 1e-12, 1 - 1e-12)])
        logs = np.log(np.maximum(totals - done, 1.0))
        return float(np.mean(logs)), float(np.std(logs))

    def calibration(self, fraction: float) -> tuple[float, float]:
        """The curve's log bias and log error at ``fraction`` of a run, from the earlier runs' answers near it
        (the error pooled with :data:`CURVE_LOG_SD` as from :data:`PSEUDO_RUNS` runs); (0, :data:`CURVE_LOG_SD`)
        where fewer than :data:`MIN_RUNS` runs recorded one."""
        means = [float(np.mean(logs[near])) for fractions, logs in self.errors
                 if np.any(near := np.abs(fractions - fraction) <= CALIBRATION_WIDTH)]
        if len(means) < MIN_RUNS:
            return 0.0, CURVE_LOG_SD
        n, n0 = len(means), PSEUDO_RUNS  # their spread, and CURVE_LOG_SD as if from PSEUDO_RUNS runs more
        return float(np.mean(means)), math.sqrt((n * _spread(np.array(means)) ** 2 + n0 * CURVE_LOG_SD ** 2) / (n + n0))

    def combine(self, done: float, curve: float | None) -> float | None:
        """The iterations left after ``done``: the curve's answer ``curve`` (None: it has none) and this
        prior's, by the module's rule."""
        if curve is not None and curve <= 0:
            return curve
        left = self.left(done)
        if left is None:
            return curve
        mean, sd = left
        if curve is None or sd <= 0:
            return math.exp(mean)
        estimate = math.exp(mean)
        for _ in range(FRACTION_ROUNDS):  # the fraction the calibration is read at, and the answer, agree
            bias, curve_sd = self.calibration(done / (done + estimate))
            w_prior, w_curve = sd ** -2, curve_sd ** -2
            estimate = math.exp((w_prior * mean + w_curve * (math.log(curve) - bias)) / (w_prior + w_curve))
        return estimate


@dataclass(frozen=True)
class Priors:
    """The job's priors (module docstring, "The layout"): of all its earlier runs (``pooled``), and of those of
    its ``mode`` on each worker count that at least :data:`MIN_RUNS` of them mostly ran on (``by_workers``), each
    with the curve's errors of all the runs."""

    pooled: IterationsPrior
    by_workers: dict[int, IterationsPrior] = field(default_factory=dict)

    @classmethod
    def of(cls, earlier: Sequence[EarlierRun | int | float], mode: str | None = None) -> "Priors | None":
        """The priors from the earlier runs for a run in ``mode`` (a run whose mode is not known counts as of
        it); None with fewer than :data:`MIN_RUNS` runs in all."""
        runs = _usable(earlier)
        pooled = IterationsPrior.of(runs)
        if pooled is None:
            return None
        groups: dict[int, list[EarlierRun]] = {}
        for r in runs:
            if r.workers is not None and (mode is None or r.mode in (None, mode)):
                groups.setdefault(r.workers, []).append(r)
        by_workers = {w: replace(p, errors=pooled.errors) for w, group in groups.items()
                      if (p := IterationsPrior.of(group, w)) is not None}
        return cls(pooled, by_workers)

    def at(self, workers: int | None) -> IterationsPrior:
        """The prior of a run on ``workers`` workers now: that of the runs on as many, else the pooled one."""
        return self.by_workers.get(workers, self.pooled) if workers is not None else self.pooled


def _usable(earlier: Sequence[EarlierRun | int | float]) -> list[EarlierRun]:
    runs = [r if isinstance(r, EarlierRun) else EarlierRun(r) for r in earlier if r is not None]
    return [r for r in runs if r.iterations and r.iterations > 0]


def _spread(logs: np.ndarray) -> float:
    """The spread of a new draw like ``logs``: their standard deviation (at least :data:`MIN_LOG_SD`), widened by
    sqrt(1 + 1/n)."""
    return max(float(np.std(logs, ddof=1)), MIN_LOG_SD) * math.sqrt(1.0 + 1.0 / logs.size)


def earlier_runs(repo, name: str, target_loss: float, estimator: str | None, before: float | None = None,
                 exclude: str | None = None) -> list[EarlierRun]:
    """The converged jobs named ``name`` with target ``target_loss`` in ``repo`` (a
    :class:`~tfonline.repository.Repository`) that started before ``before`` (None: any), but ``exclude``; each
    with the curve's answers that ``estimator`` gave it (None: none), oldest first."""
    jobs = [r for r in repo.rows("select id, iterations, started_at, target_loss, mode from jobs where name = ? and "
                                 "status = ? order by started_at", (name, "converged"))
            if r["id"] != exclude and r["iterations"] and r["target_loss"] is not None
            and math.isclose(float(r["target_loss"]), float(target_loss), rel_tol=1e-9)
            and (before is None or (r["started_at"] is not None and r["started_at"] < before))]
    answers: dict[str, list[tuple[float, float]]] = {}
    wanted = {j["id"] for j in jobs}
    if estimator is not None and jobs:
        # before version 13 an estimate's remaining_iterations was the curve's answer; 13 kept curve_iterations
        # beside it; since 14, prior_runs says the row is one whose curve_iterations alone is the curve's (NULL: none)
        for r in repo.rows("select e.job_id, e.step, case when e.prior_runs is null then "
                           "coalesce(e.curve_iterations, e.remaining_iterations) else e.curve_iterations end as curve "
                           "from estimates e join jobs j on j.id = e.job_id where j.name = ? and j.status = ? and "
                           "e.estimator = ? order by e.step", (name, "converged", estimator)):
            if r["curve"] is not None and r["job_id"] in wanted:
                answers.setdefault(r["job_id"], []).append((float(r["step"]), float(r["curve"])))
    layouts: dict[str, list[tuple[int, int]]] = {}
    workers_of: dict[str, int | None] = {}  # by setting id
    if jobs:
        for r in repo.rows("select g.job_id, g.start_step, g.setting_id, s.knobs from segments g join jobs j on "
                           "j.id = g.job_id left join settings s on s.id = g.setting_id where j.name = ? and "
                           "j.status = ? order by g.job_id, g.start_step", (name, "converged")):
            if r["job_id"] not in wanted or r["start_step"] is None:
                continue
            if r["setting_id"] not in workers_of:
                workers_of[r["setting_id"]] = _workers(r["knobs"])
            if (workers := workers_of[r["setting_id"]]) is not None:
                layouts.setdefault(r["job_id"], []).append((int(r["start_step"]), workers))
    out = []
    for job in jobs:
        steps, curve = (np.array(a).T if (a := answers.get(job["id"])) else (np.empty(0), np.empty(0)))
        out.append(EarlierRun(int(job["iterations"]), steps, curve, job["id"], job["started_at"], job["mode"],
                              tuple(layouts.get(job["id"], ()))))
    return out


def _workers(knobs: str | None) -> int | None:
    """A recorded setting's worker count (None: not a setting that says)."""
    try:
        workers = json.loads(knobs or "null")["worker"]
    except (ValueError, TypeError, KeyError):
        return None
    return workers if isinstance(workers, int) and workers > 0 else None
