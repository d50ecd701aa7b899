from __future__ import annotations

import os
import platform
import sqlite3
import subprocess
import sys
import time

import pytest

from tfonline import repository
from tfonline.exceptions import RepositoryError
from tfonline.repository import DRIVER_GONE, DRIVER_GONE_AFTER_S, SCHEMA_VERSION, Repository


pytestmark = pytest.mark.fast  # no TensorFlow cluster: `pytest -m fast` runs these in under a minute


def test_schema_wal_and_writer(db_path):
    repo = Repository(db_path)
    assert repo.schema_version == SCHEMA_VERSION
    assert repo.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    for table in ("jobs", "settings", "segments", "iterations", "decisions", "reconfigurations", "estimates"):
        assert repo.db[table].exists()
    repo.insert("settings", {"id": "s1", "knobs": "{}", "short": "x"})
    for step in range(1, 101):
        repo.insert("iterations", {"job_id": "j", "step": step, "worker": 0, "setting_id": "s1", "segment": 0,
                                   "exec_time_s": 0.01, "loss": 1.0 / step, "smoothed_loss": 1.0, "wall_time": 0})
    repo.update("settings", "s1", {"short": "y"})
    repo.flush()
    other = sqlite3.connect(db_path)  # another reader sees the committed rows
    assert other.execute("select count(*) from iterations").fetchone()[0] == 100
    assert other.execute("select short from settings").fetchone()[0] == "y"
    repo.close()
    assert Repository(db_path).schema_version == SCHEMA_VERSION  # reopening keeps it


def test_missing_directory(tmp_path):
    with pytest.raises(RepositoryError, match=r"db must be in an existing directory, got '.*/nope/r.db'"):
        Repository(tmp_path / "nope" / "r.db")


def test_unwritable_location():
    # /proc refuses new files even to root, so this holds wherever the suite runs.
    with pytest.raises(RepositoryError, match=r"db must be a writable SQLite file path, got '/proc/tfonline-test.db'"):
        Repository("/proc/tfonline-test.db")
    assert not os.path.exists("/proc/tfonline-test.db")


def test_a_file_sqlite_cannot_open_is_refused():
    # /proc/version refuses writes even to root, where os.access() says yes: SQLite's own open fails.
    with pytest.raises(RepositoryError, match=r"db must be a writable SQLite file, got '/proc/version': "
                                              r"unable to open database file"):
        Repository("/proc/version")


def test_a_read_only_repository_is_refused_for_jobs_and_read_by_the_report(db_path, read_only):
    """A real read-only SQLite file: for root a read-only mount (file modes do not stop root), else mode 0444."""
    repo = Repository(db_path)
    repo.insert("jobs", {"id": "j1", "name": "Old", "status": "converged", "started_at": 1.0})
    repo.close()
    path = read_only(db_path)
    with pytest.raises(OSError):  # the file really is read-only, whoever runs the suite
        open(path, "r+b").close()
    with pytest.raises(RepositoryError, match=f"db must be a writable SQLite file, got '{path}': it is read-only"):
        Repository(path)
    reader = Repository(path, create=False)
    assert [j["id"] for j in reader.jobs()] == ["j1"]
    reader.db.conn.close()


def test_a_sqlite_file_of_another_program_is_refused_and_left_as_it_was(tmp_path):
    path = str(tmp_path / "app.db")
    con = sqlite3.connect(path)
    con.execute("create table customers (id integer primary key, name text)")
    con.execute("insert into customers (name) values ('ada')")
    con.commit()
    con.close()
    before = open(path, "rb").read()
    with pytest.raises(RepositoryError, match=r"db must be a tfonline repository or a new file, got '.*app.db': "
                                              r"a SQLite file with other tables \(customers\); tfonline leaves it"):
        Repository(path)
    assert open(path, "rb").read() == before  # not switched to WAL, no table added
    assert not os.path.exists(path + "-wal")


def test_two_processes_create_one_schema_at_once(tmp_path):
    """Each of 4 processes opens the same new file at once and writes 200 rows: every one ends with its rows."""
    path = str(tmp_path / "shared.db")
    script = (
        "import sys, time\n"
        "from tfonline.repository import Repository\n"
        "time.sleep(max(0.0, float(sys.argv[3]) - time.time()))\n"
        "repo = Repository(sys.argv[1])\n"
        "for step in range(1, 201):\n"
        "    repo.insert('iterations', {'job_id': sys.argv[2], 'step': step, 'loss': 1.0})\n"
        "repo.close()\n"
    )
    start = time.time() + 2.0  # every process imports first, then all open the file together
    procs = [subprocess.Popen([sys.executable, "-c", script, path, f"job{i}", str(start)], stderr=subprocess.PIPE)
             for i in range(4)]
    errors = [p.communicate(timeout=120)[1].decode() for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, errors
    con = sqlite3.connect(path)
    counts = dict(con.execute("select job_id, count(*) from iterations group by job_id").fetchall())
    assert counts == {f"job{i}": 200 for i in range(4)}
    assert con.execute("select value from meta where key = 'schema_version'").fetchall() == [(str(SCHEMA_VERSION),)]


def _running_job(repo, job_id, pid, heartbeat_at, host=None):
    repo.insert("jobs", {"id": job_id, "name": "J", "status": "running", "started_at": heartbeat_at - 10,
                         "driver_host": host or platform.node(), "driver_pid": pid, "heartbeat_at": heartbeat_at})


def test_a_job_whose_driver_is_gone_is_shown_and_marked_interrupted(db_path):
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()  # a pid that no longer runs
    now = time.time()
    repo = Repository(db_path)
    _running_job(repo, "dead-pid", ended.pid, now)
    _running_job(repo, "stale-heartbeat", os.getpid(), now - DRIVER_GONE_AFTER_S - 5, host="elsewhere")
    _running_job(repo, "alive", os.getpid(), now)
    _running_job(repo, "other-host-fresh", ended.pid, now, host="elsewhere")  # cannot tell: its heartbeat is fresh
    repo.flush()
    shown = {j["id"]: (j["status"], j["stop_reason"]) for j in repo.jobs()}
    assert shown == {"dead-pid": ("interrupted", DRIVER_GONE), "stale-heartbeat": ("interrupted", DRIVER_GONE),
                     "alive": ("running", None), "other-host-fresh": ("running", None)}
    assert sorted(repo.mark_interrupted()) == ["dead-pid", "stale-heartbeat"]
    stored = dict(repo.db.execute("select id, status from jobs").fetchall())
    assert stored == {"dead-pid": "interrupted", "stale-heartbeat": "interrupted", "alive": "running",
                      "other-host-fresh": "running"}
    repo.close()


def test_the_writer_records_a_heartbeat(db_path, monkeypatch):
    monkeypatch.setattr(repository, "HEARTBEAT_INTERVAL_S", 0.1)
    repo = Repository(db_path)
    repo.insert("jobs", {"id": "j", "name": "J", "status": "running", "heartbeat_at": 0.0})
    repo.beat_for("j")
    repo.flush()
    time.sleep(0.5)
    repo.flush()
    assert time.time() - repo.db.execute("select heartbeat_at from jobs").fetchone()[0] < 1.0
    repo.close()


def test_a_write_error_is_raised_on_the_next_write_and_keeps_what_was_committed(db_path):
    repo = Repository(db_path)
    repo.insert("iterations", {"job_id": "j", "step": 1, "loss": 1.0})
    repo.flush()
    repo.insert("iterations", {"job_id": "j", "step": 1, "loss": 2.0})  # the same key twice: the commit fails
    with pytest.raises(RepositoryError, match=r"writing the repository '.*runs.db' failed: UNIQUE constraint failed"
                                              r".*; what was committed before is kept"):
        repo.flush()
    with pytest.raises(RepositoryError, match="writing the repository"):
        repo.insert("iterations", {"job_id": "j", "step": 2, "loss": 1.0})
    repo.close()
    assert sqlite3.connect(db_path).execute("select step, loss from iterations").fetchall() == [(1, 1.0)]


def test_not_a_sqlite_file(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("hello, this is not a database\n" * 10)
    with pytest.raises(RepositoryError, match=r"db must be a SQLite database, got '.*notes.txt': file is not a database"):
        Repository(path)
    assert path.read_text().startswith("hello")  # untouched


def test_directory_is_not_a_db(tmp_path):
    with pytest.raises(RepositoryError, match="db must be a SQLite file path, got the directory"):
        Repository(tmp_path)


def test_sqlite_file_of_another_program(tmp_path):
    path = tmp_path / "other.db"
    sqlite3.connect(path).execute("create table t (x)")
    with pytest.raises(RepositoryError, match="db must be a tfonline repository, got .*: it has no tfonline schema"):
        Repository(path, create=False)


def test_older_schema_version(db_path):
    Repository(db_path).close()
    sqlite3.connect(db_path, isolation_level=None).execute("update meta set value = '0' where key = 'schema_version'")
    with pytest.raises(RepositoryError, match=f"db has tfonline schema version 0, this tfonline reads version "
                                              f"{SCHEMA_VERSION}: .* was written by an older tfonline"):
        Repository(db_path)


def test_missing_file_for_readers(tmp_path):
    with pytest.raises(RepositoryError, match="db must be an existing tfonline repository, got .*: no such file"):
        Repository(tmp_path / "missing.db", create=False)


def test_a_version_1_repository_is_upgraded_in_place(db_path):
    """Versions 2 to 14 only added tables and columns: an older file keeps its rows and gains them."""
    repo = Repository(db_path)
    repo.insert("jobs", {"id": "old", "name": "Old", "status": "converged"})
    repo.close()
    con = sqlite3.connect(db_path, isolation_level=None)
    con.execute("drop table triples")
    con.execute("drop table phases")
    con.execute("drop table checkpoints")
    con.execute("drop table evaluations")
    con.execute("drop table inheritances")
    con.execute("drop table gp_fits")
    con.execute("drop table node_losses")
    con.execute("drop table node_joins")
    con.execute("alter table decisions drop column overhead_s")
    con.execute("alter table jobs drop column tuned")
    con.execute("alter table reconfigurations drop column iterations_during")
    con.execute("alter table estimates drop column curve_iterations")
    con.execute("alter table estimates drop column prior_runs")
    for column in ("driver_host", "driver_pid", "heartbeat_at", "model_dir", "signature"):
        con.execute(f"alter table jobs drop column {column}")
    con.execute("update meta set value = '1' where key = 'schema_version'")
    con.close()
    repo = Repository(db_path)
    assert repo.schema_version == SCHEMA_VERSION == 14
    assert {"driver_host", "driver_pid", "heartbeat_at", "model_dir", "signature"} <= set(repo.db["jobs"].columns_dict)
    assert all(repo.db[table].exists()
               for table in ("triples", "phases", "checkpoints", "evaluations", "inheritances", "gp_fits",
                             "node_losses", "node_joins"))
    assert "overhead_s" in repo.db["decisions"].columns_dict and "tuned" in repo.db["jobs"].columns_dict
    assert "iterations_during" in repo.db["reconfigurations"].columns_dict
    assert {"curve_iterations", "prior_runs"} <= set(repo.db["estimates"].columns_dict)
    assert [j["id"] for j in repo.jobs()] == ["old"]
    repo.close()
