from __future__ import annotations

import subprocess
import sys

import pytest
from jobs import TinyLogR

from tfonline.cli import main
from tfonline.repository import Repository


@pytest.fixture(scope="module")
def finished_db(cluster, tmp_path_factory):
    db = str(tmp_path_factory.mktemp("report") / "runs.db")
    TinyLogR().run(db=db, cluster=cluster, quiet=True)
    TinyLogR().run(db=db, cluster=cluster, max_steps=5, quiet=True, setting={"worker": 1})
    return db


def test_report_shows_status_time_iterations_segments_and_loss(finished_db, capsys):
    assert main(["report", finished_db]) == 0
    out = capsys.readouterr().out
    first, second = out.split("\n\njob ")
    assert "status:          converged: target_loss 0.6 reached" in first
    assert "completion time: " in first and "first iteration: " in first
    assert "target loss:     0.6" in first and "final loss: " in first
    assert "ps1 w2 t" in first  # the timeline row names the setting
    assert "status:          stopped at a limit: max_steps (5) reached" in second
    assert "iterations:      5" in second and "ps1 w1 t" in second


def test_report_filters_by_job_name(finished_db, capsys):
    assert main(["report", finished_db, "--job", "Nope"]) == 0
    assert capsys.readouterr().out.strip().startswith("no job named 'Nope'")


def test_report_of_an_empty_repository(tmp_path, capsys):
    db = str(tmp_path / "empty.db")
    Repository(db).close()
    assert main(["report", db]) == 0
    assert capsys.readouterr().out.strip() == f"no jobs in {db}"


def test_report_errors_are_one_line(tmp_path):
    bad = tmp_path / "x.db"
    bad.write_text("not a database" * 100)
    out = subprocess.run([sys.executable, "-m", "tfonline.cli", "report", str(bad)], capture_output=True, text=True)
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [f"tfonline: error: db must be a SQLite database, got '{bad}': file is not a database"]


def test_report_cli_does_not_import_tensorflow(finished_db):
    code = ("import sys; from tfonline.cli import main; main(['report', sys.argv[1]]); "
            "assert 'tensorflow' not in sys.modules, 'report imported TensorFlow'")
    out = subprocess.run([sys.executable, "-c", code, finished_db], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
