"""What a new job's tuner inherits from the jobs before it in the repository: their triples, by similarity.

OtterTune maps a new database workload to the most similar one it has seen
and starts from its observations; here a job's workload signature
(:mod:`tfonline.signature`) decides. Every earlier job whose signature is
within :data:`INHERIT_DISTANCE` of this one's gives its triples (setting,
loss, time per iteration, R̂, the segment's slope), each marked with that
distance. The GP takes the distance as an input (0 for this job's own
observations, see :class:`tfonline.tuner._gpyopt.GPOptimizer`), so it
learns how far another job's times carry over; the random phase is
shortened by the whole part of the inherited triples' weight,
``exp(-distance)`` each, so a weight of ``random_settings`` or more skips it.

- Two jobs of a sweep (the same model, another learning rate) have the same
  signature: distance 0, their times carry over whole.
- A job run again under its name (the second run on a repository)
  inherits as today, at the distance between the two signatures (0 when
  either has none, as before signatures were recorded).
- A job unlike any before it inherits nothing and tunes as if alone.

A tuned job given no setting starts on the best setting of its nearest
earlier job that reached its target (:attr:`Inheritance.start`), not on
TensorFlow's default, so a sweep does not pay again for the switches away
from the default. The new job's tuner revises it from its first decision on.

- The number of workers (with the user's own knobs: the setting's speed key,
  :func:`tfonline.tuner.convergence.speed_key`) is the one the earlier job
  ended on: what its tuner concluded converges soonest near the target.
- Of that job's settings of this key, the one with the lowest median
  measured time per iteration: settings of one key need the same iterations,
  so the fastest per iteration finishes first. The setting a job ends on is
  not always its best of its workers: a LogR job whose random phase ran late
  ended on ps2 w2 at 3.0-3.1 ms per iteration, where ps2 w2 with other
  thread and optimizer knobs had run at 2.7 ms (2026-11-25). TensorFlow's
  default there, on 3 workers, ran at 1.8-2.5 ms; comparing across worker
  counts needs their convergence speeds, which this rule does not weigh.
- A job whose last setting has no measured time starts on it as it is.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field

from tfonline.setting import setting_key
from tfonline.signature import Signature, distance
from tfonline.tuner._records import GPFit, Triple
from tfonline.tuner.convergence import slope_from_columns, speed_key, speed_names
from tfonline.tuner.space import KnobSpace

# Farther than this (about a factor of e in the parameters' bytes or the work per example, or another
# optimizer or mode), another job's times are not evidence about this one's.
INHERIT_DISTANCE = 1.0


@dataclass(frozen=True)
class Source:
    """One earlier job this job's tuner inherited from."""

    job_id: str
    name: str
    distance: float
    triples: int


@dataclass
class Inheritance:
    """The triples a job starts from (farthest first, its own run's last), where they came from, the GP fit
    it starts from (the latest of the nearest job that recorded one, its own run's first), and the setting
    a job given none starts on (the best of the nearest job that reached its target)."""

    triples: list[Triple] = field(default_factory=list)
    sources: list[Source] = field(default_factory=list)
    gp_fit: GPFit | None = None
    gp_fit_from: str | None = None  # the job whose fit it is
    start: dict | None = None
    start_from: str | None = None  # the job whose best setting it is


def inherit(repo, job_id: str | None, job_name: str, signature: Signature | None, space: KnobSpace,
            max_distance: float = INHERIT_DISTANCE) -> Inheritance:
    """The usable triples of earlier jobs in ``repo`` whose workload is within ``max_distance`` of this one's.

    ``job_id``'s own triples (a resumed job) come last, at distance 0 and with no source: they are the
    job's own. Triples outside ``space`` (another cluster's layouts) are left out.

    Times carry over, and so do the segments' slopes (how fast the loss fell), from which the tuner's
    convergence speeds are made: another learning rate falls at another pace per iteration, so each other
    job's slopes get a level of their own, and what carries over is how its settings' speeds differ from
    each other (rule 6 of :mod:`tfonline.tuner.convergence`). Until 2026-11-24 slopes came only from the
    same job run before: the sweep benchmark's CNN jobs then went back to 3 asynchronous workers, fast per
    iteration, which needed 1.85-2.7x the iterations of 1 at the earlier learning rates.
    """
    rows = repo.rows(
        "select j.id as job_id, j.name, j.signature, t.loss_before, t.per_iteration_s, t.remaining_iterations, "
        "t.remaining_s, t.slope_loss, t.slope, t.slope_se, s.knobs "
        "from triples t join jobs j on j.id = t.job_id join settings s on s.id = t.setting_id "
        "where t.remaining_s is not null order by j.started_at, t.segment")
    by_job: dict[str, list[Triple]] = {}
    names: dict[str, str] = {}
    distances: dict[str, float | None] = {}
    for row in rows:
        jid = row["job_id"]
        if jid not in distances:
            names[jid] = row["name"]
            distances[jid] = 0.0 if jid == job_id else _distance(job_name, signature, row["name"], row["signature"])
        d = distances[jid]
        if d is None or d > max_distance:
            continue
        setting = json.loads(row["knobs"])
        if not space.contains(setting) or not math.isfinite(row["loss_before"]):
            continue
        by_job.setdefault(jid, []).append(Triple(
            setting, row["loss_before"], row["per_iteration_s"], row["remaining_iterations"], row["remaining_s"],
            slope=slope_from_columns(row), distance=d, source=None if jid == job_id else jid))
    others = sorted((jid for jid in by_job if jid != job_id), key=lambda jid: -distances[jid])  # nearest last
    inheritance = Inheritance()
    for jid in others + ([job_id] if job_id in by_job else []):
        inheritance.triples += by_job[jid]
        if jid != job_id:
            inheritance.sources.append(Source(jid, names[jid], distances[jid], len(by_job[jid])))
    inheritance.sources.reverse()  # nearest first, as the report lists them
    for jid in ([job_id] if job_id in by_job else []) + [source.job_id for source in inheritance.sources]:
        inheritance.gp_fit = _latest_fit(repo, jid)
        if inheritance.gp_fit is not None:
            inheritance.gp_fit_from = jid
            break
    for source in inheritance.sources:
        inheritance.start = _best_setting(repo, source.job_id, space, by_job[source.job_id])
        if inheritance.start is not None:
            inheritance.start_from = source.job_id
            break
    return inheritance


def _best_setting(repo, job_id: str, space: KnobSpace, triples: list[Triple]) -> dict | None:
    """The setting a job that reached its target would best start on (the module's docstring), if ``space``
    holds it; else None."""
    rows = list(repo.rows("select s.knobs from jobs j join segments g on g.job_id = j.id "
                          "join settings s on s.id = g.setting_id where j.id = ? and j.status = 'converged' "
                          "order by g.segment desc limit 1", [job_id]))
    if not rows:
        return None
    last = json.loads(rows[0]["knobs"])
    if not space.contains(last):
        return None
    names = speed_names(space)
    key = speed_key(last, names)
    times: dict[str, tuple[dict, list[float]]] = {}
    for t in triples:
        if t.per_iteration_s is not None and speed_key(t.setting, names) == key:
            times.setdefault(setting_key(t.setting), (t.setting, []))[1].append(t.per_iteration_s)
    if setting_key(last) not in times:
        return last
    return min(times.values(), key=lambda entry: statistics.median(entry[1]))[0]


def _latest_fit(repo, job_id: str) -> GPFit | None:
    """A job's latest recorded GP fit (:class:`~tfonline.tuner._records.GPFit`), or None."""
    rows = list(repo.rows("select form, hyperparameters, cost_s from gp_fits where job_id = ? "
                          "order by step desc limit 1", [job_id]))
    if not rows:
        return None
    return GPFit(tuple(json.loads(rows[0]["form"])), tuple(json.loads(rows[0]["hyperparameters"])), rows[0]["cost_s"])


def _distance(name: str, signature: Signature | None, other_name: str, other: str | None) -> float | None:
    """This job's distance to another: by signatures when both have one; 0 for the same name when either
    lacks one (a repository from before signatures); None (not comparable) otherwise."""
    if signature is not None and other:
        try:
            return distance(signature, Signature.from_dict(json.loads(other)))
        except (TypeError, ValueError, KeyError):
            pass  # a signature this tfonline cannot read: judged by the name alone
    return 0.0 if name == other_name else None
