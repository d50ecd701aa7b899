"""Replay: run a recorded job again with its recorded settings at their recorded steps.

``tfonline replay DB --job ID`` (or :func:`replay`) makes the job's class
again (recorded as ``module:Class`` or ``path/file.py:Class``), sets the
attributes its object had (a sweep's grid, ``__init__``'s), checks that its
model is the one recorded (its workload signature), and runs it with the
recorded mode and seed from the recorded first setting, switching to each
later setting after the step its segment started after (a
:func:`~tfonline.tuner.schedule.Schedule`), for at most the recorded
iterations. The replay is a job of its own in the same repository, its
``replay_of`` the original.

- **Sync mode** reproduces the losses bit for bit: a synchronous step is
  deterministic (each worker's gradient in its own accumulator, summed in
  rank order), and its workers hold at each scheduled step, so each switch
  comes after exactly the recorded step.
- **Async mode** reproduces the settings, not the losses: workers push
  their updates in the order they finish, so each step's parameters
  differ from run to run, and a live switch is made at the first segment
  end at or after its step while the workers train on, so it comes a few
  steps later. The comparison says how far each switch and the losses
  came out.

What a replay cannot make again it refuses with one line: a job recorded
before classes were (tfonline 0.2), a class that cannot be imported, a
model whose signature changed, a job that tuned knobs of its own (give them
as ``extra_knobs``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Sequence

from tfonline.exceptions import ConfigurationError
from tfonline.setting import knob_table


class ReplayError(ConfigurationError):
    """A recorded job cannot be replayed: the line says why."""


@dataclass(frozen=True)
class Recorded:
    """What a replay takes from the repository about one job."""

    job_id: str
    job_class: str
    attributes: dict[str, Any]
    mode: str
    seed: int
    iterations: int
    target_loss: float
    node_count: int
    start: dict[str, Any]
    switches: list[tuple[int, dict[str, Any]]]  # (the step it came after, the setting from the next step on)
    signature: dict[str, Any] | None


@dataclass
class Comparison:
    """The replay against the original."""

    original: str
    replay: str
    mode: str
    compared_steps: int
    identical_steps: int
    first_difference: int | None  # the first step whose losses differ
    max_difference: float
    switches: list[tuple[int, int | None]] = field(default_factory=list)  # (recorded step, replayed step)

    @property
    def exact(self) -> bool:
        return self.compared_steps > 0 and self.identical_steps == self.compared_steps and all(
            replayed == recorded for recorded, replayed in self.switches)

    def text(self) -> str:
        lines = [f"replay {self.replay} of {self.original} ({self.mode} mode)"]
        moved = [f"{recorded}->{replayed if replayed is not None else 'none'}" for recorded, replayed in self.switches]
        off = sum(recorded != replayed for recorded, replayed in self.switches)
        lines.append(f"  switches: {len(self.switches)}, {len(self.switches) - off} at their recorded step"
                     + (f" (recorded->replayed: {', '.join(moved)})" if off else ""))
        lines.append(f"  losses: {self.identical_steps} of {self.compared_steps} steps identical"
                     + ("" if self.first_difference is None else
                        f"; first difference at step {self.first_difference}, largest {self.max_difference:.3g}"))
        if self.mode == "sync":
            lines.append("  exact: the same settings at the same steps and the same loss at every step" if self.exact
                         else "  NOT exact: a synchronous replay should be (is the data, or the machine, another?)")
        else:
            lines.append("  async mode cannot be exact: workers push their updates in the order they finish, "
                         "and a live switch comes at the first segment end after its step")
        return "\n".join(lines)


def recorded(db: str | os.PathLike, job_id: str) -> Recorded:
    """What the repository ``db`` keeps of job ``job_id`` that a replay needs.

    Raises:
        RepositoryError: ``db`` is not a tfonline repository (of this version).
        ReplayError: no such job, or one recorded without its class.
    """
    from tfonline.repository import Repository

    repo = Repository(db, create=False)
    try:
        rows = list(repo.rows("select * from jobs where id = ?", (job_id,)))
        if not rows:
            known = [r["id"] for r in repo.rows("select id from jobs order by started_at desc limit 3")]
            raise ReplayError(f"--job must be a job of {os.fspath(db)!r}, got {job_id!r}"
                              + (f"; its latest: {', '.join(known)}" if known else "; it has no jobs"))
        job = rows[0]
        if not job["job_class"]:
            raise ReplayError(f"job {job_id} was recorded without its class (by tfonline 0.2 or older): "
                              f"it cannot be replayed")
        settings = _settings(repo, job_id)
    finally:
        repo.close()
    if settings is None:
        raise ReplayError(f"job {job_id} has no recorded segments: it never trained, there is nothing to replay")
    start, switches = settings
    return Recorded(job_id, job["job_class"], json.loads(job["attributes"] or "{}"), job["mode"], job["seed"] or 0,
                    job["iterations"] or 0, job["target_loss"], job["node_count"], start, switches,
                    json.loads(job["signature"]) if job["signature"] else None)


def _settings(repo, job_id: str) -> tuple[dict[str, Any], list[tuple[int, dict[str, Any]]]] | None:
    """Job ``job_id``'s first setting and its switches (the step each came after, and the knobs it changed),
    from its segments; None without any."""
    # The setting from each step on: a segment that ran no iteration (two switches one after the other) gives
    # way to the next one from the same step.
    from_step = {row["start_step"]: json.loads(row["knobs"]) for row in repo.rows(
        "select g.start_step, s.knobs from segments g join settings s on s.id = g.setting_id "
        "where g.job_id = ? and g.start_step is not null order by g.segment", (job_id,))}
    if not from_step:
        return None
    steps = sorted(from_step)
    current = from_step[steps[0]]
    switches = []
    for step in steps[1:]:
        setting = from_step[step]
        if setting != current:
            switches.append((step - 1, {k: v for k, v in setting.items() if current.get(k) != v}))
            current = setting
    return from_step[steps[0]], switches


def replay(db: str | os.PathLike, job_id: str, *, cluster=None, nodes: int | None = None,
           extra_knobs: Sequence[Any] = (), quiet: bool = True) -> Comparison:
    """Runs job ``job_id`` of ``db`` again as recorded (see the module's docstring); returns how the replay
    compares with it. It runs on ``cluster`` (as :meth:`MLJobFramework.run` takes it), else on an embedded
    cluster of the recorded node count (or ``nodes``).

    Raises:
        ReplayError: the job cannot be replayed (the line says why).
        TensorFlowRequirementError: no TensorFlow is installed, or too old a one.
    """
    from tfonline._tensorflow import require

    record = recorded(db, job_id)
    require()
    job = _job(record)
    _check_knobs(record, extra_knobs)
    _check_model(record, job)
    schedule = [(step, changes) for step, changes in record.switches if step >= 1]
    result = job.run(setting=record.start, db=db, mode=record.mode, seed=record.seed, cluster=cluster,
                     nodes=record.node_count if cluster is None and nodes is None else nodes,
                     max_steps=max(1, record.iterations), schedule=schedule or None, extra_knobs=extra_knobs,
                     quiet=quiet, checkpoint_every_s=None)
    _mark(db, result.job_id, job_id)
    return compare(db, job_id, result.job_id)


def _job(record: Recorded):
    from tfonline.sweep import load_class

    try:
        job_class = load_class(record.job_class)
    except ConfigurationError as e:
        raise ReplayError(f"job {record.job_id}'s class cannot be made again: {e}") from None
    try:
        job = job_class()
    except Exception as e:  # noqa: BLE001 (the user's constructor: one line)
        raise ReplayError(f"job {record.job_id}'s class {record.job_class} failed to construct: "
                          f"{type(e).__name__}: {e}") from None
    for name, value in record.attributes.items():
        try:
            setattr(job, name, value)
        except AttributeError as e:
            raise ReplayError(f"job {record.job_id}'s attribute {name}={value!r} cannot be set again on "
                              f"{record.job_class}: {e}") from None
    job.target_loss = record.target_loss
    return job


def _check_knobs(record: Recorded, extra_knobs: Sequence[Any]) -> None:
    known = set(knob_table(max(record.node_count, 2))) | {getattr(k, "name", None) for k in extra_knobs}
    own = sorted(set(record.start) - known)
    if own:
        raise ReplayError(f"job {record.job_id} tuned knobs of its own ({', '.join(own)}): give them as "
                          f"extra_knobs to replay it")


def _check_model(record: Recorded, job) -> None:
    """The job's model is the one recorded: the same workload signature."""
    from tfonline.placement import DEFAULT_PARTITION_MIN_BYTES
    from tfonline.signature import signature

    if record.signature is None:
        return
    now = signature(job, DEFAULT_PARTITION_MIN_BYTES, record.mode).to_dict()
    changed = [name for name in record.signature if record.signature[name] != now.get(name)]
    if changed:
        name = changed[0]
        raise ReplayError(f"job {record.job_id}'s model changed since it ran: its {name} was "
                          f"{record.signature[name]!r}, {record.job_class} now gives {now.get(name)!r}"
                          + (f" ({len(changed) - 1} more differences)" if len(changed) > 1 else ""))


def _mark(db, replay_id: str, original: str) -> None:
    from tfonline.repository import Repository

    repo = Repository(db)
    try:
        repo.start_writer()
        repo.update("jobs", replay_id, {"replay_of": original})
        repo.flush()
    finally:
        repo.close()


def compare(db: str | os.PathLike, original: str, replayed: str) -> Comparison:
    """How job ``replayed`` compares with job ``original``: the loss at each step both ran, and each switch's
    step."""
    from tfonline.repository import Repository

    repo = Repository(db, create=False)
    try:
        mode = next(repo.rows("select mode from jobs where id = ?", (original,)))["mode"]
        losses = [{row["step"]: row["loss"] for row in repo.rows(
            "select step, loss from iterations where job_id = ?", (job,))} for job in (original, replayed)]
        recorded_switches, switched = [(_settings(repo, job) or ({}, []))[1] for job in (original, replayed)]
    finally:
        repo.close()
    steps = sorted(set(losses[0]) & set(losses[1]))
    differing = [s for s in steps if losses[0][s] != losses[1][s]]
    largest = max((abs(losses[0][s] - losses[1][s]) for s in differing), default=0.0)
    pairs = [(step, switched[i][0] if i < len(switched) and switched[i][1] == changes else None)
             for i, (step, changes) in enumerate(recorded_switches)]
    return Comparison(original, replayed, mode, len(steps), len(steps) - len(differing),
                      differing[0] if differing else None, largest, pairs)
