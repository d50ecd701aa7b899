"""The repository: one SQLite file, through sqlite-utils, that outlives jobs.

Writes go through a queue to one writer thread, so training threads never
wait on the disk. The file is in WAL mode with ``synchronous=NORMAL``: a
committed transaction survives a crash of the driver (SIGKILL included), and
readers (``tfonline report``) can read while a job writes. The writer
commits at least every ``commit_interval_s``.

Schema (version :data:`SCHEMA_VERSION`), one row per:

- ``jobs``: a run of an ``MLJobFramework``: name, script, status and why it
  stopped, target, knob space, host and TensorFlow fingerprint, and the
  driver's host, pid and heartbeat (a job whose driver is gone without
  saying so is "interrupted (driver gone)", see :func:`driver_gone`).
- ``settings``: a resolved setting (all knobs), keyed by a content hash.
- ``segments``: the iterations run under one setting, in order.
- ``iterations``: one global step: worker, setting, execution time, loss.
- ``decisions``, ``reconfigurations``, ``estimates``: the tuner's choices,
  the setting changes and the progress estimates (filled by later parts;
  an estimate's ``remaining_iterations`` is the ETA's, ``curve_iterations``
  the estimator's own answer (NULL: none) and ``prior_runs`` how many of
  the job's earlier runs the ETA took with it (:mod:`tfonline.estimator._prior`;
  versions 13 and 14: before, the ETA was the estimator's answer);
  ``gp_fits``: the GP's hyperparameters each time a decision fitted them.
- ``checkpoints``, ``evaluations``: the model's checkpoints (where, at
  which step, what writing one cost, the training state to resume from)
  and its metrics on held-out data; ``resumes``: each time a job was
  resumed from a checkpoint; ``node_losses``: a node lost mid-job, and
  what the job did without it; ``node_joins``: a node that joined mid-job.
"""

from __future__ import annotations

import itertools
import os
import platform
import queue
import sqlite3
import threading
import time
import urllib.parse
from typing import Any, Iterator

import sqlite_utils

from tfonline.exceptions import RepositoryError

SCHEMA_VERSION = 14
MIGRATES_FROM = 1  # versions from here on are upgraded in place: every change since is additive
# A running job's driver writes a heartbeat this often; a job whose heartbeat is older than
# DRIVER_GONE_AFTER_S (or whose driver process is gone from this host) was interrupted.
HEARTBEAT_INTERVAL_S = 5.0
DRIVER_GONE_AFTER_S = 60.0
DRIVER_GONE = "interrupted (driver gone)"

_TABLES: dict[str, tuple[dict[str, type], str | tuple[str, ...]]] = {
    "meta": ({"key": str, "value": str}, "key"),
    "jobs": (
        {
            "id": str,
            "name": str,
            "script": str,
            "mode": str,
            "status": str,
            "stop_reason": str,
            "message": str,
            "target_loss": float,
            "max_steps": int,
            "max_seconds": float,
            "started_at": float,
            "first_iteration_at": float,
            "finished_at": float,
            "completion_time_s": float,
            "iterations": int,
            "final_loss": float,
            "node_count": int,
            "cluster": str,
            "knob_space": str,
            "host": str,
            "tf_version": str,
            "python": str,
            "seed": int,
            "tuned": int,
            "tuning_overhead_s": float,
            "driver_host": str,  # v4: where the driver ran, its pid and its last sign of life
            "driver_pid": int,
            "heartbeat_at": float,
            "model_dir": str,  # v6: where its checkpoints are
            "signature": str,  # v6: its workload's signature (JSON, tfonline.signature.Signature)
            "job_class": str,  # v8: module:Class or path/file.py:Class (tfonline.sweep.load_class reads it)
            "attributes": str,  # v8: the job object's own attributes (JSON), as tfonline replay sets them again
            "replay_of": str,  # v8: the job this one replays (tfonline.replay)
        },
        "id",
    ),
    "settings": ({"id": str, "knobs": str, "short": str}, "id"),
    "segments": (
        {
            "job_id": str,
            "segment": int,
            "setting_id": str,
            "phase": str,
            "start_step": int,
            "end_step": int,
            "start_loss": float,
            "end_loss": float,
            "started_at": float,
            "ended_at": float,
        },
        ("job_id", "segment"),
    ),
    "iterations": (
        {
            "job_id": str,
            "step": int,
            "worker": int,
            "setting_id": str,
            "segment": int,
            "exec_time_s": float,
            "loss": float,
            "smoothed_loss": float,
            "wall_time": float,
        },
        ("job_id", "step"),
    ),
    "decisions": (
        {
            "job_id": str,
            "step": int,
            "phase": str,
            "current_setting_id": str,
            "candidate_setting_id": str,
            "loss": float,
            "expected_improvement_s": float,
            "reconfiguration_cost_s": float,
            "types": str,
            "applied": int,
            "reason": str,
            "overhead_s": float,
            "wall_time": float,
        },
        ("job_id", "step"),
    ),
    "reconfigurations": (
        {
            "job_id": str,
            "step": int,
            "from_setting_id": str,
            "to_setting_id": str,
            "types": str,
            "technique": str,
            "actions": str,  # JSON list, in words (tfonline.reconfig.Plan.actions)
            "cost_s": float,
            "bytes_moved": int,
            "iterations_during": int,  # completed under the old setting while the switch was made (v3)
            "wall_time": float,
        },
        ("job_id", "step"),
    ),
    "triples": (
        {
            "job_id": str,
            "segment": int,
            "setting_id": str,
            "loss_before": float,
            "per_iteration_s": float,
            "remaining_iterations": float,
            "remaining_s": float,
            "estimator": str,
            "reason": str,
            # how the loss fell in the segment (tfonline.tuner.convergence.SegmentSlope), for a resumed job's
            # convergence speeds (v5)
            "slope_loss": float,
            "slope": float,
            "slope_se": float,
        },
        ("job_id", "segment"),
    ),
    "phases": ({"job_id": str, "phase": str, "start_step": int, "wall_time": float}, ("job_id", "phase")),
    # v6: the checkpoints a job wrote (kind "periodic", "final" at its end, "interrupted" at Ctrl-C or SIGTERM)
    # and its metrics on held-out data
    "checkpoints": (
        {"job_id": str, "step": int, "path": str, "kind": str, "cost_s": float, "wall_time": float,
         "setting_id": str, "state": str},  # state: what a resumed job needs (JSON, TrainingState.saved)
        ("job_id", "step"),
    ),
    "resumes": (  # v6: a job resumed from a checkpoint, rewound to its step
        {"job_id": str, "resumed_at": float, "step": int, "checkpoint": str, "lost_steps": int, "gap_s": float},
        ("job_id", "resumed_at"),
    ),
    "node_losses": (  # v11: a node lost mid-job (tfonline._recovery)
        {"job_id": str, "step": int, "node": int, "address": str, "role": str, "cause": str, "action": str,
         "wall_time": float},
        ("job_id", "node"),
    ),
    "node_joins": (  # v12: a node of a given cluster that joined mid-job (tfonline._recovery)
        {"job_id": str, "step": int, "node": int, "address": str, "wall_time": float},
        ("job_id", "node"),
    ),
    "gp_fits": (  # v9: the GP's hyperparameters, each time a decision fitted them (tfonline.tuner._records.GPFit)
        {"job_id": str, "step": int, "form": str, "hyperparameters": str, "cost_s": float},
        ("job_id", "step"),
    ),
    "inheritances": (  # v7: the earlier jobs a tuned job's tuner started from (tfonline.tuner.inherit)
        {"job_id": str, "from_job_id": str, "name": str, "distance": float, "triples": int,
         "gp_fit": int,  # v9: 1 for the job whose GP fit the tuner started from
         "start": int},  # v10: 1 for the job whose (best) setting the job started on
        ("job_id", "from_job_id"),
    ),
    "evaluations": (
        {"job_id": str, "step": int, "metric": str, "value": float, "cost_s": float, "wall_time": float},
        ("job_id", "step", "metric"),
    ),
    "estimates": (
        {
            "job_id": str,
            "step": int,
            "estimator": str,
            "loss": float,
            "remaining_iterations": float,
            "remaining_s": float,
            "curve_iterations": float,  # v13
            "prior_runs": int,  # v14
            "wall_time": float,
        },
        ("job_id", "step", "estimator"),
    ),
}


def _open(path: str, create: bool) -> sqlite_utils.Database:
    """Opens ``path`` as a SQLite database, with one-line errors for bad paths."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise RepositoryError(f"db must be a SQLite file path, got the directory {path!r}")
    if not os.path.exists(path):
        if not create:
            raise RepositoryError(f"db must be an existing tfonline repository, got {path!r}: no such file")
        parent = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(parent):
            raise RepositoryError(f"db must be in an existing directory, got {path!r}: {parent} does not exist")
        if not os.access(parent, os.W_OK):
            raise RepositoryError(f"db must be a writable path, got {path!r}: {parent} is not writable")
    elif create and not os.access(path, os.W_OK):
        raise RepositoryError(f"db must be a writable SQLite file, got {path!r}: it is read-only")
    target, uri = path, False
    if not create and not (os.access(path, os.W_OK) and os.access(os.path.dirname(os.path.abspath(path)), os.W_OK)):
        # A reader of a file on read-only storage: SQLite cannot make the WAL index beside it. With no WAL
        # left (a job that ended checkpoints it), nobody can change the file through this storage.
        wal = os.path.exists(path + "-wal")
        target, uri = f"file:{urllib.parse.quote(os.path.abspath(path))}?{'mode=ro' if wal else 'immutable=1'}", True
    try:
        conn = sqlite3.connect(target, check_same_thread=False, timeout=30, uri=uri)
        conn.execute("select count(*) from sqlite_master").fetchone()
    except sqlite3.OperationalError as e:
        raise RepositoryError(f"db must be a writable SQLite file path, got {path!r}: {e}") from e
    except sqlite3.DatabaseError as e:
        raise RepositoryError(f"db must be a SQLite database, got {path!r}: {e}") from e
    return sqlite_utils.Database(conn)


def _while_locked(statement, timeout_s: float = 30.0):
    """Runs ``statement``, again while another process holds the file's lock. Some steps of opening a file
    answer "database is locked" at once, without SQLite's busy timeout (changing the journal mode to WAL
    needs the file to itself): when jobs open one new repository together, one of 4 processes failed so,
    once in a few hundred runs of tests/test_repository.py. Creating the schema is safe to repeat."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return statement()
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _batch_key(op: tuple) -> tuple:
    """Consecutive inserts into one table (with the same ``replace``) are written together, in order."""
    return ("insert", op[1], op[3]) if op[0] == "insert" else (op[0],)


class Repository:
    """A tfonline repository file.

    Args:
        path: the SQLite file; created with the schema when missing.
        create: create the file and schema if needed (a job does); readers
            (the report) pass False and get an error for a missing file.
        commit_interval_s: the longest a queued row waits for its commit.
    """

    def __init__(self, path: str | os.PathLike, create: bool = True, commit_interval_s: float = 0.2):
        self.path = os.fspath(path)
        self.db = _open(self.path, create)
        self._commit_interval_s = commit_interval_s
        self._queue: queue.Queue = queue.Queue()
        self._writer: threading.Thread | None = None
        self._writer_error: BaseException | None = None
        self._heartbeat_job: str | None = None
        try:
            if create:
                _while_locked(self._create_schema)
            self.schema_version = _while_locked(self._check_schema)
        except sqlite3.OperationalError as e:
            raise RepositoryError(f"db must be a writable SQLite file, got {self.path!r}: {e}") from e

    # -- schema --------------------------------------------------------------

    def _create_schema(self) -> None:
        tables = self.db.table_names()
        if tables and "meta" not in tables:
            shown = ", ".join(tables[:5]) + (", ..." if len(tables) > 5 else "")
            raise RepositoryError(
                f"db must be a tfonline repository or a new file, got {self.path!r}: a SQLite file with other "
                f"tables ({shown}); tfonline leaves it as it is"
            )
        if tables and not self._wants_changes():
            return
        self.db.execute("PRAGMA journal_mode=WAL")
        # One process at a time creates or upgrades the schema: BEGIN IMMEDIATE takes the write lock,
        # and a second process waits for it, then finds the tables made.
        conn = self.db.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            self._create_tables()
        except BaseException:
            conn.rollback()
            raise
        conn.commit()

    def _wants_changes(self) -> bool:
        """Whether an existing tfonline file lacks a table, a column or the current version."""
        if not self.db["meta"].exists() or self._stored_version() != SCHEMA_VERSION:
            return True
        return any(not self.db[name].exists() or set(columns) - set(self.db[name].columns_dict)
                   for name, (columns, _) in _TABLES.items())

    def _create_tables(self) -> None:
        """Creates the tables, or adds what later versions added (the caller holds the write lock)."""
        version = self._stored_version() if self.db["meta"].exists() else None
        if version is not None and not MIGRATES_FROM <= version <= SCHEMA_VERSION:
            return  # not ours to change; _check_schema says why
        for name, (columns, pk) in _TABLES.items():
            if not self.db[name].exists():
                self.db[name].create(columns, pk=pk)
            else:  # an older repository: add what later versions added
                have = set(self.db[name].columns_dict)
                for column, kind in columns.items():
                    if column not in have:
                        self.db[name].add_column(column, kind)
        self.db.execute("insert or replace into meta (key, value) values ('schema_version', ?)",
                        [str(SCHEMA_VERSION)])
        self.db.execute("create index if not exists idx_iterations_segment on iterations (job_id, segment)")

    def _stored_version(self) -> int:
        row = self.db.execute("select value from meta where key = 'schema_version'").fetchone()
        return int(row[0]) if row else 0

    def _check_schema(self) -> int:
        if not self.db["meta"].exists():
            raise RepositoryError(f"db must be a tfonline repository, got {self.path!r}: it has no tfonline schema")
        version = self._stored_version()
        if version != SCHEMA_VERSION:
            upgrade = "; 'tfonline upgrade DB' upgrades it in place" if MIGRATES_FROM <= version < SCHEMA_VERSION else ""
            raise RepositoryError(
                f"db has tfonline schema version {version}, this tfonline reads version {SCHEMA_VERSION}: "
                f"{self.path!r} was written by {'an older' if version < SCHEMA_VERSION else 'a newer'} tfonline"
                + upgrade
            )
        return version

    # -- writing, through one thread -----------------------------------------

    def start_writer(self) -> None:
        """Starts the writer thread; rows given to :meth:`insert` and friends go through it."""
        if self._writer is None:
            self._writer = threading.Thread(target=self._write_loop, name="tfonline-repository", daemon=True)
            self._writer.start()

    def insert(self, table: str, row: dict[str, Any], replace: bool = False) -> None:
        self._submit(("insert", table, row, replace))

    def update(self, table: str, pk: Any, values: dict[str, Any]) -> None:
        self._submit(("update", table, pk, values))

    def beat_for(self, job_id: str) -> None:
        """Has the writer record ``job_id``'s heartbeat every :data:`HEARTBEAT_INTERVAL_S` while it runs."""
        self._heartbeat_job = job_id
        self.start_writer()

    def _failed(self) -> RepositoryError:
        e = self._writer_error
        return RepositoryError(f"writing the repository {self.path!r} failed: {e}; what was committed before is kept")

    def _submit(self, op: tuple) -> None:
        if self._writer_error is not None:
            raise self._failed() from self._writer_error
        if self._writer is None:
            self.start_writer()
        self._queue.put(op)

    def flush(self, timeout_s: float = 30.0) -> None:
        """Waits until every row queued so far is committed."""
        if self._writer is None:
            return
        done = threading.Event()
        self._queue.put(("flush", done))
        deadline = time.monotonic() + timeout_s
        while not done.wait(0.1):
            if not self._writer.is_alive() or time.monotonic() > deadline:
                if self._writer_error is None:
                    raise RepositoryError(f"the repository did not commit within {timeout_s:.0f} s")
                break
        if self._writer_error is not None:
            raise self._failed() from self._writer_error

    def close(self) -> None:
        """Commits what is queued, stops the writer and closes the file."""
        if self._writer is not None:
            self._queue.put(("stop", None))
            self._writer.join(timeout=30)
            self._writer = None
        self.db.conn.close()

    def _write_loop(self) -> None:
        try:
            # The writer has a connection of its own: sqlite3 connections are not
            # meant to be used by two threads at once.
            db = sqlite_utils.Database(sqlite3.connect(self.path, timeout=30))
            db.execute("PRAGMA synchronous=NORMAL")
            self._write(db)
        except BaseException as e:  # the writer is gone: every later write and flush says why
            if self._writer_error is None:
                self._writer_error = e

    def _write(self, db: sqlite_utils.Database) -> None:
        next_beat = time.monotonic()
        while True:
            try:
                ops = [self._queue.get(timeout=HEARTBEAT_INTERVAL_S if self._heartbeat_job else None)]
            except queue.Empty:
                ops = [("beat",)]  # nothing to write: only the heartbeat
            deadline = time.monotonic() + self._commit_interval_s
            while ops[-1][0] not in ("flush", "stop"):
                try:
                    ops.append(self._queue.get(timeout=max(0.0, deadline - time.monotonic())))
                except queue.Empty:
                    break
            beat = self._heartbeat_job is not None and time.monotonic() >= next_beat
            if beat:
                next_beat = time.monotonic() + HEARTBEAT_INTERVAL_S
            if self._writer_error is None:
                try:
                    with db.conn:
                        for kind, group in itertools.groupby(ops, key=_batch_key):
                            if kind[0] == "insert":  # a run of inserts into one table: one statement per batch
                                _, table, replace = kind
                                db[table].insert_all((op[2] for op in group), pk=_TABLES[table][1],
                                                     replace=replace, batch_size=500)
                            elif kind[0] == "update":
                                for _, table, pk, values in group:
                                    db[table].update(pk, values)
                        if beat:  # the driver's sign of life (see driver_gone)
                            db.execute("update jobs set heartbeat_at = ? where id = ?",
                                       [time.time(), self._heartbeat_job])
                except Exception as e:  # surfaced to the job on its next write
                    self._writer_error = e
            if ops[-1][0] == "flush":
                ops[-1][1].set()
            elif ops[-1][0] == "stop":
                db.conn.close()
                return

    # -- reading -------------------------------------------------------------

    def rows(self, sql: str, params: tuple | dict = ()) -> Iterator[dict[str, Any]]:
        cursor = self.db.execute(sql, params)
        names = [d[0] for d in cursor.description]
        for values in cursor.fetchall():
            yield dict(zip(names, values))

    def jobs(self, name: str | None = None) -> list[dict[str, Any]]:
        """The jobs (all, or those of this name or id), oldest first; a job whose driver is gone
        (:func:`driver_gone`) is shown as "interrupted" even where the file still says "running"."""
        if name is None:
            rows = list(self.rows("select * from jobs order by started_at"))
        else:
            rows = list(self.rows("select * from jobs where name = ? or id = ? order by started_at", (name, name)))
        now = time.time()
        for row in rows:
            if driver_gone(row, now):
                row.update(status="interrupted", stop_reason=DRIVER_GONE)
        return rows

    def rewind(self, job_id: str, step: int) -> None:
        """Removes what ``job_id`` recorded after ``step`` (a resumed job's checkpoint: the training after it
        was lost), directly: its iterations, estimates, decisions and GP fits, switches, checkpoints and
        evaluations, and the segments and phases that began after it; the segment it fell in ends there (at its step's
        wall time). The tuner's triples stay."""
        with self.db.conn:
            for table in ("iterations", "estimates", "decisions", "gp_fits", "reconfigurations", "checkpoints",
                          "evaluations"):
                self.db.execute(f"delete from {table} where job_id = ? and step > ?", [job_id, step])
            for table in ("segments", "phases"):
                self.db.execute(f"delete from {table} where job_id = ? and start_step > ?", [job_id, step])
            self.db.execute("update segments set end_step = :step, ended_at = (select wall_time from iterations "
                            "where job_id = :job and step = :step) where job_id = :job and start_step <= :step "
                            "and (end_step is null or end_step > :step or ended_at is null)",
                            {"job": job_id, "step": step})

    def mark_interrupted(self) -> list[str]:
        """Records every job whose driver is gone as "interrupted (driver gone)", directly; returns their ids."""
        gone = [row for row in self.rows("select * from jobs where status = 'running'") if driver_gone(row)]
        with self.db.conn:
            for row in gone:
                self.db.execute("update jobs set status = 'interrupted', stop_reason = ?, finished_at = ? "
                                "where id = ? and status = 'running'",
                                [DRIVER_GONE, row.get("heartbeat_at") or row["started_at"], row["id"]])
        return [row["id"] for row in gone]


def last_wall_time(repo: Repository, job_id: str) -> float | None:
    """When ``job_id``'s last iteration ended: its last step's (steps are counted in the order they end), a
    look-up by the primary key however long the job."""
    row = next(repo.rows("select wall_time from iterations where job_id = ? order by step desc limit 1", (job_id,)),
               None)
    return None if row is None else row["wall_time"]


def driver_gone(job: dict[str, Any], now: float | None = None) -> bool:
    """Whether a job recorded as running has lost its driver: its process is gone from this host, or its
    heartbeat is older than :data:`DRIVER_GONE_AFTER_S` (a driver killed, or on a host that went away)."""
    if job.get("status") != "running":
        return False
    pid = job.get("driver_pid")
    if pid and job.get("driver_host") == platform.node() and not _process_alive(pid):
        return True
    beat = job.get("heartbeat_at")
    return beat is not None and (now or time.time()) - beat > DRIVER_GONE_AFTER_S


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended
    except OSError:
        return True
