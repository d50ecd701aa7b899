"""A benchmark that stops and goes on: the runs it has finished, kept in a journal beside its results.

``make bench-full`` runs 37 jobs per real workload, each of 5 minutes or
more: about 18 hours on this machine, against sittings of at most three.
``benchmarks/paper.py --resume`` goes on with the newest unfinished
benchmark of its mode in ``--out``: every run the journal holds is taken from
it as it was measured, and only the others run. ``--stop-after MINUTES``
ends a sitting cleanly: no run starts once the sitting has lasted that long
(the one under way finishes; every sitting runs at least one).

The journal, ``<stem>-runs.jsonl``, holds one JSON object per line:

- first, the benchmark's configuration (mode, workloads, R, seeds, the
  fixed settings' draw seed): a resumed benchmark must be the same one;
- then one line per finished run: its key (``logr/tuned/0``,
  ``logr/fixed/3``, ``paper-sim/all`` ...), its row, and the benchmark's
  wall time so far, summed over its sittings; and at each sitting's start,
  the code's revision (a benchmark whose sittings ran on several revisions
  says so in its tables) and at its end, why it ended;
- last, once every workload is done, ``{"finished": true}``.

A run that a sitting left unfinished (Ctrl-C, a machine that went away) is
run again from its start. Its rows stay in the repositories, except in the
tuned runs' repository: a tuned run starts from the triples of the tuned runs
before it (``tuning={"resume": True}``, the default), so after each finished
tuned run that repository is copied aside (``<tuned db>.kept``, SQLite's
backup) and a resumed benchmark starts from that copy.

A sitting can be on another machine, whose checkout has what git keeps and
no repository (git ignores them). So the tables and figures made at a
workload's end read none: each run leaves its traces in
``<stem>-traces.jsonl`` (its loss curve, and a fixed run its estimator
ratings), written before its journal line. And the tuned runs' repository
is also kept as SQL text without its iterations and estimates
(``<tuned db>.kept.sql``, which no later job reads of an earlier one), from
which a sitting restores it where the SQLite copy is gone. A resumed
benchmark whose tuned runs left neither is refused, unless told to go on
without (``paper.py --accept-lost``).

A sitting on another machine would also measure at another speed: each
sitting checks each workload's speed before running its first run of it
(:mod:`speed`), and the journal keeps every check (``{"speed": name, ...}``).
A workload whose check is off its first is deferred; ``paper.py --redo
NAME`` runs it again whole, from a ``{"redo": name}`` line on: the runs and
checks of that workload before it are set aside (they stay in the file), and
its tuned runs are forgotten by the tuned runs' repository (:func:`forget`),
so that none to come inherits another machine's times.

``--redo NAME/tuned`` sets aside only the workload's runs that tune (its tuned
runs and its checkpoint-restart run): the tuner changed since they ran, and
its fixed runs, which no tuner touched, stay kept, as do its speed checks.
"""

from __future__ import annotations

import glob
import json
import os
import sqlite3
import time

SUFFIX = "-runs.jsonl"
TRACES = "-traces.jsonl"  # beside the journal: what runs leave for the tables at a workload's end
CARRIED = ".kept.sql"  # beside the tuned runs' repository: its kept copy as SQL text, without iterations
TUNED = "tuned"  # --redo NAME/tuned: a workload's runs that tune, alone
TUNING_RUNS = ("tuned", "checkpoint")  # the kinds of run (a key's second part) that tune: what NAME/tuned redoes


class JournalError(Exception):
    """A journal that cannot be resumed: one line, naming what was expected and what was found."""


class Journal:
    """The finished runs of one benchmark (``path``), appended to as each run ends."""

    def __init__(self, path: str, config: dict, runs: dict[str, dict] | None = None, elapsed_s: float = 0.0,
                 sittings: int = 1, revisions: list[str] | None = None, traces: dict[str, dict] | None = None):
        self.path, self.config = path, config
        self.runs = dict(runs or {})
        self.traces = dict(traces or {})  # a run's traces (its loss curve, its estimator ratings), by its key
        self.lost: dict[int, str] = {}  # by sitting: the repository it went on without (paper.py --accept-lost)
        self.before_s = elapsed_s  # the earlier sittings' wall time, up to their last finished run
        self.sittings = sittings
        self.revisions = list(revisions or [])  # the code revisions the sittings ran on, in order, each once
        self.speeds: dict[str, list[dict]] = {}  # by workload: its speed checks since it was last redone, in order
        self.redone: dict[str, list[int]] = {}  # by workload or NAME/tuned: the sittings that ran it again (--redo)
        self._started = time.monotonic()

    @classmethod
    def start(cls, path: str, config: dict) -> "Journal":
        """A new journal at ``path`` (an earlier one there is replaced)."""
        with open(path, "w") as f:
            f.write(json.dumps({"config": config}) + "\n")
        if os.path.exists(_traces_path(path)):
            os.remove(_traces_path(path))
        return cls(path, config)

    @classmethod
    def resume(cls, path: str, config: dict) -> "Journal":
        """The journal at ``path``, for the same ``config``; its runs are kept, and a new sitting begins."""
        lines = _lines(path, mend=True)
        found = lines[0].get("config") if lines else None
        if found != config:
            raise JournalError(f"{path} is the journal of another benchmark: expected {_brief(config)}, "
                               f"got {_brief(found) if found else 'no configuration line'}")
        elapsed = next((line["elapsed_s"] for line in reversed(lines) if "run" in line), 0.0)
        revisions = list(dict.fromkeys(line["revision"] for line in lines if line.get("revision")))
        book = cls(path, config, elapsed_s=elapsed, sittings=1 + sum(1 for line in lines if "revision" in line),
                   revisions=revisions)
        for line in lines[1:]:
            if "run" in line:
                book.runs[line["run"]] = line["row"]
            elif "speed" in line:
                book.speeds.setdefault(line["speed"], []).append(line)
            elif "redo" in line:
                book._set_aside(line["redo"])
                book.redone.setdefault(line["redo"], []).append(line["sitting"])
        traces = read_traces(path[: -len(SUFFIX)], mend=True)
        book.traces = {key: traces[key] for key in book.runs if key in traces}
        book.lost = {line["sitting"]: line["lost"] for line in lines if line.get("lost")}  # a sitting's first line
        return book

    @property
    def finished(self) -> bool:
        return _finished(self.path)

    @property
    def sitting_s(self) -> float:
        """This sitting's wall time so far."""
        return time.monotonic() - self._started

    @property
    def elapsed_s(self) -> float:
        """The benchmark's wall time: the earlier sittings' and this one's."""
        return self.before_s + self.sitting_s

    def record(self, key: str, row: dict, traces: dict | None = None) -> None:
        """Keeps a finished run: its row, and its ``traces`` (written first: a run is kept once its row is)."""
        if traces is not None:
            self.traces[key] = traces
            _append(_traces_path(self.path), {"run": key, "traces": traces})
        self.runs[key] = row
        self._append({"run": key, "row": row, "elapsed_s": self.elapsed_s})

    def retrace(self, key: str, traces: dict) -> None:
        """Replaces the traces of kept run ``key`` (a later line of the traces' file wins over an earlier)."""
        self.traces[key] = traces
        _append(_traces_path(self.path), {"run": key, "traces": traces})

    def begin_sitting(self, revision: str | None = None, **facts) -> None:
        """Notes what this sitting ran on (the code's revision, the date) in the journal."""
        if revision and revision not in self.revisions:
            self.revisions.append(revision)
        self._append({"sitting": self.sittings, "revision": revision, **facts})
        if facts.get("lost"):
            self.lost[self.sittings] = facts["lost"]

    def reference_speed(self, name: str) -> dict | None:
        """Workload ``name``'s first speed check since it was last redone (:mod:`speed`), or None."""
        return next((check for check in self.speeds.get(name, []) if not check.get("deferred")), None)

    def record_speed(self, name: str, check: dict, deferred: bool = False) -> dict:
        """Keeps this sitting's speed ``check`` of workload ``name`` (``deferred``: its runs were put off, so it
        is not a reference); returns the journal's line."""
        line = {"speed": name, "sitting": self.sittings, **check, **({"deferred": True} if deferred else {})}
        self.speeds.setdefault(name, []).append(line)
        self._append(line)
        return line

    def redo(self, name: str) -> list[dict]:
        """Runs workload ``name`` again whole from this sitting on: its runs and speed checks so far are set aside;
        ``NAME/tuned``: only its runs that tune (:data:`TUNING_RUNS`). Returns the rows set aside."""
        dropped = self._set_aside(name)
        self.redone.setdefault(name, []).append(self.sittings)
        self._append({"redo": name, "sitting": self.sittings})
        return dropped

    def _set_aside(self, name: str) -> list[dict]:
        workload, tuned_only = redo_scope(name)
        keys = [key for key in self.runs if _redone(key, workload, tuned_only)]
        if not tuned_only:  # the whole workload: its speed checks too
            self.speeds.pop(workload, None)
        for key in keys:
            self.traces.pop(key, None)
        return [self.runs.pop(key) for key in keys]

    def end_sitting(self, why: str) -> None:
        self._append({"sitting_ended": why, "elapsed_s": self.elapsed_s})

    def finish(self) -> None:
        self._append({"finished": True, "elapsed_s": self.elapsed_s})

    def _append(self, line: dict) -> None:
        _append(self.path, line)


def redo_scope(name: str) -> tuple[str, bool]:
    """``--redo``'s ``name`` read: its workload, and whether only its runs that tune (``NAME/tuned``)."""
    workload, _, part = name.partition("/")
    return workload, part == TUNED


def _redone(key: str, workload: str, tuned_only: bool) -> bool:
    """Whether a redo of ``workload`` (``tuned_only``: its runs that tune) sets run ``key`` aside."""
    kinds = key.split("/")
    return kinds[0] == workload and (not tuned_only or (len(kinds) > 1 and kinds[1] in TUNING_RUNS))


def read_traces(stem: str, mend: bool = False) -> dict[str, dict]:
    """The traces kept beside the journal of ``stem`` (a benchmark's path without ``-runs.jsonl``), by run key
    (``mend``: as :func:`_lines`)."""
    path = stem + TRACES
    return {line["run"]: line["traces"] for line in (_lines(path, mend) if os.path.exists(path) else [])}


def _append(path: str, line: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(line) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _traces_path(path: str) -> str:
    """The traces' file beside the journal at ``path`` (which ends in :data:`SUFFIX`)."""
    return path[: -len(SUFFIX)] + TRACES


def latest_unfinished(out: str, mode: str) -> str | None:
    """The stem of the newest journal of ``mode`` in ``out`` that has no ``finished`` line, or None."""
    paths = sorted(glob.glob(os.path.join(out, f"*-{mode}{SUFFIX}")), key=os.path.getmtime, reverse=True)
    return next((path[: -len(SUFFIX)] for path in paths if not _finished(path)), None)


def _finished(path: str) -> bool:
    return any(line.get("finished") for line in _lines(path))


def keep(db: str) -> None:
    """Copies the repository ``db`` aside (``<db>.kept``), consistently, with SQLite's backup; and again as SQL
    text without the iterations and estimates (``<db>.kept.sql``, a few hundred kilobytes where the copy has
    hundreds of megabytes), which git keeps: a later job reads none of them from an earlier one."""
    _backup(db, db + ".kept")
    with sqlite3.connect(":memory:") as copy:
        with sqlite3.connect(db) as source:
            source.backup(copy)
        source.close()
        tables = {name for (name,) in copy.execute("select name from sqlite_master where type = 'table'")}
        for table in tables & {"iterations", "estimates"}:
            copy.execute(f"delete from {table}")
        copy.commit()
        with open(db + CARRIED + ".part", "w") as f:
            f.writelines(statement + "\n" for statement in copy.iterdump())
    copy.close()
    os.replace(db + CARRIED + ".part", db + CARRIED)


def remove(db: str, suffixes=("", "-wal", "-shm", ".kept", CARRIED)) -> None:
    """Removes the repository ``db``: its file, SQLite's, and its kept copy."""
    for suffix in suffixes:
        if os.path.exists(db + suffix):
            os.remove(db + suffix)


def restore(db: str) -> bool:
    """Replaces ``db`` by its kept copy, or where that is gone (another machine) by its SQL text; with neither,
    removes it. True when a copy was restored."""
    remove(db, ("", "-wal", "-shm"))
    if os.path.exists(db + ".kept"):
        _backup(db + ".kept", db)
        return True
    if os.path.exists(db + CARRIED):
        with open(db + CARRIED) as f, sqlite3.connect(db) as conn:
            conn.executescript(f.read())
        conn.close()
        return True
    return False


def forget(db: str, job_ids: list[str]) -> None:
    """Removes the jobs ``job_ids`` from the repository ``db`` (every row of theirs, in every table), and keeps it
    again (:func:`keep`): the tuned runs of a workload run again whole, whose triples no job to come may inherit."""
    if not job_ids or not os.path.exists(db):
        return
    marks = ", ".join("?" * len(job_ids))
    with sqlite3.connect(db) as conn:
        for (table,) in conn.execute("select name from sqlite_master where type = 'table'").fetchall():
            columns = {row[1] for row in conn.execute(f"pragma table_info([{table}])")}
            key = "job_id" if "job_id" in columns else "id" if table == "jobs" else None
            if key:
                conn.execute(f"delete from [{table}] where {key} in ({marks})", job_ids)
    conn.close()
    keep(db)


def kept_copy(db: str) -> str | None:
    """The path of ``db``'s kept copy (:func:`keep`), or of its SQL text where only that is here; else None."""
    return next((db + suffix for suffix in (".kept", CARRIED) if os.path.exists(db + suffix)), None)


def _backup(source: str, target: str) -> None:
    with sqlite3.connect(source) as src, sqlite3.connect(target) as dst:
        src.backup(dst)
    src.close()
    dst.close()


def _lines(path: str, mend: bool = False) -> list[dict]:
    """The journal's lines; a last line cut short by a machine that went away is left out (``mend``: and cut
    from the file, so that the next line appended starts a line of its own)."""
    lines, good = [], 0
    with open(path, "rb") as f:
        for text in f:
            try:
                if not text.endswith(b"\n"):
                    break
                lines.append(json.loads(text))
            except json.JSONDecodeError:
                break
            good += len(text)
    if mend and good < os.path.getsize(path):
        os.truncate(path, good)
    return lines


def _brief(config: dict) -> str:
    return ", ".join(f"{key} {value}" for key, value in config.items())
