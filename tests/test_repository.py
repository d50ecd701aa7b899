from __future__ import annotations

import os
import sqlite3

import pytest

from tfonline.exceptions import RepositoryError
from tfonline.repository import SCHEMA_VERSION, Repository


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


def test_read_only_file_is_refused():
    with pytest.raises(RepositoryError, match=r"db must be a (writable|SQLite)"):
        Repository("/proc/version")


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
    with pytest.raises(RepositoryError, match="db has tfonline schema version 0, this tfonline reads version 3"):
        Repository(db_path)


def test_missing_file_for_readers(tmp_path):
    with pytest.raises(RepositoryError, match="db must be an existing tfonline repository, got .*: no such file"):
        Repository(tmp_path / "missing.db", create=False)


def test_a_version_1_repository_is_upgraded_in_place(db_path):
    """Versions 2 and 3 only added tables and columns: an older file keeps its rows and gains them."""
    repo = Repository(db_path)
    repo.insert("jobs", {"id": "old", "name": "Old", "status": "converged"})
    repo.close()
    con = sqlite3.connect(db_path, isolation_level=None)
    con.execute("drop table triples")
    con.execute("drop table phases")
    con.execute("alter table decisions drop column overhead_s")
    con.execute("alter table jobs drop column tuned")
    con.execute("alter table reconfigurations drop column iterations_during")
    con.execute("update meta set value = '1' where key = 'schema_version'")
    con.close()
    repo = Repository(db_path)
    assert repo.schema_version == 3
    assert repo.db["triples"].exists() and repo.db["phases"].exists()
    assert "overhead_s" in repo.db["decisions"].columns_dict and "tuned" in repo.db["jobs"].columns_dict
    assert "iterations_during" in repo.db["reconfigurations"].columns_dict
    assert [j["id"] for j in repo.jobs()] == ["old"]
    repo.close()
