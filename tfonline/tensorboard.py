"""A job's history as TensorBoard event files: written live while it trains, or from its repository after.

Both read the repository (what it holds is what TensorBoard shows) and
write with TensorFlow's own event writer, ``tf.compat.v1.summary.FileWriter``,
each event at the wall time its row records. One run per job, named after
its id, under the log directory. Scalars:

- ``loss`` and ``smoothed_loss`` per iteration (a long job's every k-th, at
  most :data:`MAX_POINTS_PER_WRITE` per write: TensorBoard keeps 1,000 per
  tag anyway);
- ``seconds_per_iteration``: each segment's wall time per iteration, at
  its last step;
- ``eta_s``: each estimate of the remaining time;
- ``setting/<knob>`` at each segment's first step: the setting's numeric
  knobs (switches as 0/1), and the setting in short form as text
  (``setting``);
- ``switch/cost_s`` at each switch's step, and the switch in words as text
  (``switch``: from, to, technique);
- ``eval/<metric>``: the metrics on held-out data at each evaluation.

``run(tensorboard=DIR)`` writes what is new every :data:`LIVE_INTERVAL_S`
seconds while the job trains and the rest at its end;
``tfonline report DB --tensorboard DIR`` writes a finished (or running)
job's whole history.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from typing import Any

from tfonline.exceptions import ConfigurationError
from tfonline.report.plots import file_stem
from tfonline.repository import Repository

logger = logging.getLogger("tfonline")

LIVE_INTERVAL_S = 2.0
MAX_POINTS_PER_WRITE = 2000


class EventWriter:
    """Writes ``job_id``'s rows of ``repo`` as TensorBoard events into ``logdir/<job id>``; each
    :meth:`write_new` writes the rows added since the last one."""

    def __init__(self, repo: Repository, job_id: str, logdir: str | os.PathLike):
        from tfonline._tensorflow import require

        tf = require()
        self.tf, self.repo, self.job_id = tf, repo, job_id
        self.run_dir = os.path.join(os.fspath(logdir), file_stem(job_id))
        with tf.Graph().as_default():  # the v1 writer refuses eager mode; it needs no graph of its own
            self._writer = tf.compat.v1.summary.FileWriter(self.run_dir)
        self._after = {"iterations": 0, "estimates": 0, "reconfigurations": 0, "evaluations": 0}
        self._segments = -1  # the last segment written whole (ended)
        self._segment_started = -1  # the last segment whose setting was written
        self._next = 0.0
        self.broken: str | None = None  # why the events stopped (write_safely)

    def due(self) -> bool:
        return time.monotonic() >= self._next

    def write_new(self) -> int:
        """Writes the rows added since the last call; returns how many events."""
        self._next = time.monotonic() + LIVE_INTERVAL_S
        events = (self._iterations() + self._segment_events() + self._estimates() + self._switches()
                  + self._evaluations())
        for event in events:
            self._writer.add_event(event)
        self._writer.flush()
        return len(events)

    def write_safely(self) -> None:
        """:meth:`write_new` for a job that trains: an error is logged, and stops the events; the job goes on."""
        if self.broken is not None:
            return
        try:
            self.write_new()
        except Exception as e:  # noqa: BLE001 (a full disk, a bug: the job matters more than its events)
            self.broken = f"{type(e).__name__}: {e}"
            logger.warning("TensorBoard events for %s stopped: %s; the job goes on", self.job_id, self.broken)

    def close(self) -> None:
        self._writer.close()

    # -- one kind of row each ------------------------------------------------

    def _rows(self, sql: str, *params) -> list[dict[str, Any]]:
        return list(self.repo.rows(sql, (self.job_id, *params)))

    def _iterations(self) -> list:
        after = self._after["iterations"]
        new = self._rows("select count(*) as n, max(step) as last from iterations where job_id = ? and step > ?",
                         after)[0]
        if not new["n"]:
            return []
        stride = math.ceil(new["n"] / MAX_POINTS_PER_WRITE)  # SQLite leaves the others out
        rows = self._rows("select step, loss, smoothed_loss, wall_time from iterations where job_id = ? and step > ? "
                          "and ((step - ?) % ? = 0 or step = ?) order by step", after, after, stride, new["last"])
        self._after["iterations"] = new["last"]
        return [self._scalars(r["wall_time"], r["step"], loss=r["loss"], smoothed_loss=r["smoothed_loss"])
                for r in rows]

    def _segment_events(self) -> list:
        events = []
        for seg in self._rows("select s.segment, s.start_step, s.end_step, s.started_at, s.ended_at, st.knobs, "
                              "st.short from segments s left join settings st on st.id = s.setting_id "
                              "where s.job_id = ? and s.segment > ? order by s.segment", self._segments):
            if seg["segment"] > self._segment_started and seg["knobs"]:
                self._segment_started = seg["segment"]
                knobs = {f"setting/{k}": float(v) for k, v in json.loads(seg["knobs"]).items()
                         if isinstance(v, (bool, int, float))}
                events.append(self._scalars(seg["started_at"], seg["start_step"], **knobs))
                events.append(self._text(seg["started_at"], seg["start_step"], "setting", seg["short"]))
            if seg["ended_at"] is None:
                break  # the current segment: its pace is written when it ends
            self._segments = seg["segment"]
            timed = next(self.repo.rows("select count(*) as n, min(wall_time) as first, max(wall_time) as last "
                                        "from iterations where job_id = ? and segment = ?",
                                        (self.job_id, seg["segment"])))
            if timed["n"] > 1:
                events.append(self._scalars(seg["ended_at"], seg["end_step"],
                                            seconds_per_iteration=(timed["last"] - timed["first"]) / (timed["n"] - 1)))
        return events

    def _estimates(self) -> list:
        rows = self._rows("select step, remaining_s, wall_time from estimates where job_id = ? and step > ? "
                          "and remaining_s is not null order by step", self._after["estimates"])
        if rows:
            self._after["estimates"] = rows[-1]["step"]
        return [self._scalars(r["wall_time"], r["step"], eta_s=r["remaining_s"]) for r in rows]

    def _switches(self) -> list:
        rows = self._rows("select r.step, r.technique, r.types, r.cost_s, r.wall_time, a.short as old, "
                          "b.short as new from reconfigurations r left join settings a on a.id = r.from_setting_id "
                          "left join settings b on b.id = r.to_setting_id where r.job_id = ? and r.step > ? "
                          "and r.cost_s is not null order by r.step", self._after["reconfigurations"])
        events = []
        for r in rows:
            self._after["reconfigurations"] = r["step"]
            events.append(self._scalars(r["wall_time"], r["step"], **{"switch/cost_s": r["cost_s"]}))
            events.append(self._text(r["wall_time"], r["step"], "switch",
                                     f"{r['old']} -> {r['new']} ({r['types']}; {r['technique']}, {r['cost_s']:.2f} s)"))
        return events

    def _evaluations(self) -> list:
        rows = self._rows("select step, metric, value, wall_time from evaluations where job_id = ? and step > ? "
                          "order by step", self._after["evaluations"])
        if rows:
            self._after["evaluations"] = rows[-1]["step"]
        return [self._scalars(r["wall_time"], r["step"], **{f"eval/{r['metric']}": r["value"]}) for r in rows]

    # -- events --------------------------------------------------------------

    def _scalars(self, wall_time: float, step: int, **values: float):
        summary = self.tf.compat.v1.Summary(value=[
            self.tf.compat.v1.Summary.Value(tag=tag, simple_value=value) for tag, value in values.items()
            if value is not None])
        return self.tf.compat.v1.Event(wall_time=wall_time, step=step, summary=summary)

    def _text(self, wall_time: float, step: int, tag: str, text: str):
        tf = self.tf
        metadata = tf.compat.v1.SummaryMetadata(plugin_data=tf.compat.v1.SummaryMetadata.PluginData(plugin_name="text"))
        value = tf.compat.v1.Summary.Value(tag=tag, metadata=metadata, tensor=tf.make_tensor_proto(text))
        return tf.compat.v1.Event(wall_time=wall_time, step=step, summary=tf.compat.v1.Summary(value=[value]))


def check_logdir(logdir: str | os.PathLike) -> None:
    """Makes ``logdir`` if needed; a one-line error when it cannot be written."""
    path = os.fspath(logdir)
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise ConfigurationError(f"tensorboard must be a writable directory, got {path!r}: {e.strerror}") from e
    if not os.access(path, os.W_OK):
        raise ConfigurationError(f"tensorboard must be a writable directory, got {path!r}: it is read-only")


def write(repo: Repository, job_id: str, logdir: str | os.PathLike) -> str:
    """Writes ``job_id``'s whole history from ``repo``; returns its run's folder."""
    writer = EventWriter(repo, job_id, logdir)
    try:
        writer.write_new()
    finally:
        writer.close()
    return writer.run_dir
