from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from jobs import TinyLogR

from tfonline.cli import main
from tfonline.exceptions import TfOnlineError
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


def test_report_cli_works_without_tensorflow(finished_db):
    """As in a Python without TensorFlow: importing it fails (``sys.modules`` holds None for it)."""
    code = ("import sys, tempfile; sys.modules['tensorflow'] = None; "
            "from tfonline.cli import main; assert main(['report', sys.argv[1]]) == 0; "
            "d = tempfile.mkdtemp(); assert main(['report', sys.argv[1], '--format', 'json', '--html', "
            "d + '/r.html', '--plots', d, '--compare', 'TinyLogR']) == 0; "
            "assert main(['upgrade', sys.argv[1]]) == 0; "
            "assert sys.modules['tensorflow'] is None")
    out = subprocess.run([sys.executable, "-c", code, finished_db], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


# -- the full report: a tuned job that converged, with estimates, decisions and switches --------------------

TUNING = {"initial_iterations": 20, "random_settings": 2, "segment_iterations": 15, "min_segment_s": 0,
          "exploration_budget": None, "resume": False}


@pytest.fixture(scope="module")
def tuned_db(cluster, tmp_path_factory):
    from jobs import SlowerLogR, TunedLogR

    db = str(tmp_path_factory.mktemp("tuned-report") / "runs.db")
    tuned = TunedLogR().run(setting={"ps": 2, "worker": 1}, tune=True, db=db, cluster=cluster, quiet=True,
                             tuning=TUNING)
    fixed = SlowerLogR().run(setting={"ps": 1, "worker": 1}, db=db, cluster=cluster, quiet=True)
    assert tuned.status == fixed.status == "converged", (tuned.stop_reason, fixed.stop_reason)
    return db, tuned, fixed


def test_the_text_report_explains_a_tuned_job(tuned_db, capsys):
    db, tuned, _ = tuned_db
    assert main(["report", db, "--job", tuned.job_id]) == 0
    out = capsys.readouterr().out
    assert out.count("\njob ") == 0 and out.startswith(f"job {tuned.job_id} (TunedLogR, async)")
    assert "time in phases:  start-up " in out and " initial " in out and " online " in out, out
    assert "settings compared (Table IV; * differs from the initial setting):" in out
    assert "\n    ps " in out and "\n    worker " in out and "initial" in out  # knob rows, the initial column
    assert "tuning overhead: " in out and "% of the job" in out
    assert "decisions:       (step, loss, EI / switch cost in s" in out
    assert "reconfigurations: " in out and "s lost in all" in out
    assert "ETA accuracy:    (estimated vs actual remaining time)" in out
    assert "\n    at 25%" in out and "\n    at 75% (step " in out  # 25%: an estimate, or "no estimate yet"


def test_the_json_report_round_trips_and_follows_its_schema(tuned_db, capsys):
    from tfonline.report import JSON_SCHEMA, REPORT_VERSION, collect, job_text

    db, tuned, fixed = tuned_db
    assert main(["report", db, "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["report_version"] == REPORT_VERSION and report["db"] == db
    assert [j["id"] for j in report["jobs"]] == [tuned.job_id, fixed.job_id]
    for job in report["jobs"]:
        assert set(job) == set(JSON_SCHEMA)
    repo = Repository(db, create=False)
    try:
        for job, row in zip(report["jobs"], repo.jobs()):
            assert job == json.loads(json.dumps(collect(repo, row)))
            assert job_text(job) == job_text(collect(repo, row))  # the text is written from the same content
    finally:
        repo.db.conn.close()
    first = report["jobs"][0]
    assert first["tuned"] and first["status"] == "converged" and first["iterations"] == tuned.iterations
    assert [p["phase"] for p in first["phases"]][:2] == ["start-up", "initial"]
    assert first["reconfigurations"] and all(m["technique"] for m in first["reconfigurations"])
    # Each fraction of the training time with an estimate before it (on a slow machine the first may come after 25%).
    fractions = [e["fraction"] for e in first["eta_accuracy"]]
    assert fractions in ([0.25, 0.5, 0.75], [0.5, 0.75], [0.75]), fractions
    for e in first["eta_accuracy"]:
        assert e["actual_remaining_s"] > 0 and e["error"] == pytest.approx(
            (e["estimated_remaining_s"] - e["actual_remaining_s"]) / e["actual_remaining_s"])
    assert [e["actual_remaining_s"] for e in first["eta_accuracy"]] == sorted(
        (e["actual_remaining_s"] for e in first["eta_accuracy"]), reverse=True)
    table = first["settings_table"]
    assert table["columns"][0]["label"] == "initial" and table["columns"][-1]["label"] in ("final", "initial = final")
    assert all(len(row["values"]) == len(table["columns"]) for row in table["rows"])
    assert not report["jobs"][1]["tuned"] and report["jobs"][1]["decisions"] == []


def test_a_fraction_of_the_training_time_before_the_first_estimate_says_so(tuned_db):
    from tfonline.report import collect, job_text
    from tfonline.report.html import page

    db, tuned, _ = tuned_db
    repo = Repository(db, create=False)
    try:
        report = collect(repo, next(row for row in repo.jobs() if row["id"] == tuned.job_id))
        report["eta_accuracy"] = report["eta_accuracy"][-1:]  # as if the first estimate came after 50%
        text, html = job_text(report), page(repo, [report])
    finally:
        repo.db.conn.close()
    assert "\n    at 25%: no estimate yet\n    at 50%: no estimate yet\n    at 75% (step " in text, text
    assert "<td class=''>25%</td><td class=''>-</td><td class=''>no estimate yet</td>" in html


def test_compare_shows_completion_times_side_by_side(tuned_db, capsys):
    db, tuned, fixed = tuned_db
    assert main(["report", db, "--compare", fixed.job_id, tuned.job_id]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith(fixed.job_id) and lines[1].rstrip().endswith("1.00x")
    import sqlite3

    times = dict(sqlite3.connect(db).execute("select id, completion_time_s from jobs").fetchall())
    ratio = float(lines[2].split()[-1].rstrip("x"))
    assert lines[2].startswith(tuned.job_id) and ratio == pytest.approx(
        times[tuned.job_id] / times[fixed.job_id], abs=0.006)
    assert main(["report", db, "--format", "json", "--compare", fixed.job_id, tuned.job_id]) == 0
    comparison = json.loads(capsys.readouterr().out)["comparison"]
    assert comparison["baseline"] == fixed.job_id and comparison["jobs"][0]["ratio_to_first"] == 1.0


def test_compare_names_a_job_that_is_not_there(tuned_db):
    db, _, _ = tuned_db
    out = subprocess.run([sys.executable, "-m", "tfonline.cli", "report", db, "--compare", "Nope"],
                         capture_output=True, text=True)
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        f"tfonline: error: --compare takes job ids or names in {db}, got 'Nope': no such job"]


def _png_shape(path):
    import matplotlib.image

    return matplotlib.image.imread(path).shape


def test_plots_are_pngs_of_the_expected_size(tuned_db, tmp_path, capsys):
    import numpy as np
    from matplotlib.image import imread

    from tfonline.report.plots import HEIGHT_PX, PLOTS, WIDTH_PX

    db, tuned, fixed = tuned_db
    folder = tmp_path / "plots"
    assert main(["report", db, "--plots", str(folder)]) == 0
    assert capsys.readouterr().err.strip() == f"plots: 8 PNG files in {folder}"
    for job in (tuned, fixed):
        for name in PLOTS:
            path = folder / f"{job.job_id}-{name}.png"
            image = imread(str(path))
            assert image.shape[:2] == (HEIGHT_PX, WIDTH_PX)
            assert np.std(image[..., :3]) > 0.05  # drawn, not blank


def _c0_pixels(path) -> int:
    """How many pixels have matplotlib's first line colour (C0, #1f77b4): the loss curves."""
    import numpy as np
    from matplotlib.image import imread

    rgb = (imread(str(path))[..., :3] * 255).astype(int)
    return int((np.abs(rgb - np.array([31, 119, 180])).sum(axis=-1) < 40).sum())


def test_the_html_page_renders_its_plots_in_a_browser(tuned_db, tmp_path, capsys):
    import shutil

    db, tuned, _ = tuned_db
    page = tmp_path / "report.html"
    assert main(["report", db, "--job", tuned.job_id, "--html", str(page)]) == 0
    capsys.readouterr()
    text = page.read_text()
    assert text.count("src='data:image/png;base64,") == 4  # self-contained: every plot embedded
    assert "Table IV" in text and "<h3>Reconfigurations</h3>" in text and "<h3>ETA accuracy</h3>" in text
    assert "http://" not in text and "https://" not in text and "src='data:" in text
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium is not installed (the Makefile installs Debian's chromium; this machine could not)")
    shot = tmp_path / "shot.png"
    out = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                          f"--screenshot={shot}", "--window-size=1200,1400", page.as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert shot.exists(), out.stderr[-2000:]
    assert _png_shape(shot)[:2] == (1400, 1200)
    assert _c0_pixels(shot) > 2000  # the loss curves are on screen: the embedded images rendered
    # The same page without its images shows none of that colour: what was counted is the plots.
    bare = tmp_path / "bare.html"
    bare.write_text(text.replace("src='data:image/png;base64,", "src='data:image/png;base64,x"))
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--screenshot={shot}", "--window-size=1200,1400", bare.as_uri()],
                   capture_output=True, text=True, timeout=120)
    assert _c0_pixels(shot) < 200


# -- repositories that are empty, failed, in use, or old -----------------------------------------------------

def test_every_format_works_on_an_empty_repository(tmp_path, capsys):
    db = str(tmp_path / "empty.db")
    Repository(db).close()
    assert main(["report", db, "--format", "json", "--html", str(tmp_path / "r.html"),
                 "--plots", str(tmp_path / "p")]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["jobs"] == []
    assert f"plots: none, no jobs in {db}" in captured.err
    assert f"no jobs in {db}" in (tmp_path / "r.html").read_text()


def test_a_failed_job_is_reported_with_why(tmp_path, capsys):
    from jobs import TinyLogR as Job

    class Diverging(Job):
        def model_fn(self, features, labels):
            return super().model_fn(features, labels) * float("nan")

    db = str(tmp_path / "runs.db")
    with pytest.raises(TfOnlineError, match="training diverged"):
        Diverging().run(db=db, nodes=2, quiet=True)
    assert main(["report", db, "--format", "json", "--plots", str(tmp_path / "p")]) == 0
    (job,) = json.loads(capsys.readouterr().out)["jobs"]
    assert job["status"] == "failed" and job["stop_reason"] == "the loss became nan at step 1: training diverged"
    assert job["iterations"] == 0 and job["eta_accuracy"] == []
    assert [seg["iterations"] for seg in job["segments"]] == [0]
    assert main(["report", db]) == 0
    out = capsys.readouterr().out
    assert "status:          failed: " in out and "(none: the job stopped before its first iteration)" in out
    assert "ETA accuracy:    - (the job did not converge" in out


def test_a_running_job_is_reported_while_it_writes(db_path):
    from test_processes import _start_driver, _wait_for_training

    driver = _start_driver(db_path)
    try:
        _wait_for_training(driver, db_path, at_least=30)
        out = subprocess.run([sys.executable, "-m", "tfonline.cli", "report", db_path, "--format", "json"],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        (job,) = json.loads(out.stdout)["jobs"]
        assert job["status"] == "running" and job["completion_time_s"] is None and job["iterations"] >= 30
        text = subprocess.run([sys.executable, "-m", "tfonline.cli", "report", db_path], capture_output=True,
                              text=True, timeout=60).stdout
        assert "status:          running" in text and "not finished" in text
        assert driver.poll() is None  # the report did not disturb the job
    finally:
        driver.send_signal(signal.SIGINT)
        try:
            driver.wait(timeout=60)
        finally:
            driver.kill()


def test_an_older_repository_says_how_to_upgrade_it(tmp_path):
    import sqlite3

    db = str(tmp_path / "old.db")
    Repository(db).close()
    con = sqlite3.connect(db, isolation_level=None)
    con.execute("alter table reconfigurations drop column iterations_during")
    con.execute("update meta set value = '2' where key = 'schema_version'")
    con.close()
    cli = [sys.executable, "-m", "tfonline.cli"]
    out = subprocess.run(cli + ["report", db], capture_output=True, text=True)
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        f"tfonline: error: db has tfonline schema version 2, this tfonline reads version 14: {db!r} was written by "
        "an older tfonline; 'tfonline upgrade DB' upgrades it in place"]
    out = subprocess.run(cli + ["upgrade", db], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == f"{db}: upgraded in place to this tfonline's schema"
    out = subprocess.run(cli + ["report", db], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == f"no jobs in {db}"
    missing = str(tmp_path / "nope.db")
    out = subprocess.run(cli + ["upgrade", missing], capture_output=True, text=True)
    assert out.returncode == 1 and out.stderr.strip() == (
        f"tfonline: error: db must be an existing tfonline repository, got {missing!r}: no such file")


def test_plots_stay_inside_their_folder_whatever_the_job_ids(tmp_path, capsys):
    """Job ids are data from the file: one that looks like a path must not make the report write elsewhere."""
    db = str(tmp_path / "runs.db")
    repo = Repository(db)
    hostile = ["../../escaped", "/tmp/absolute-escape", "a/../../b", "..", "plain-id"]
    for i, job_id in enumerate(hostile):
        repo.insert("jobs", {"id": job_id, "name": "J", "status": "failed", "started_at": 1.0 + i, "mode": "async",
                             "tuned": 0, "target_loss": 0.5})
    repo.close()
    folder = tmp_path / "deep" / "plots"
    before = {p for p in tmp_path.rglob("*")}
    assert main(["report", db, "--plots", str(folder)]) == 0
    written = {p for p in tmp_path.rglob("*")} - before
    assert written and all(folder in p.parents or p == folder for p in written if p.suffix == ".png")
    assert {p.parent for p in written if p.is_file()} == {folder}
    assert len([p for p in written if p.suffix == ".png"]) == 4 * len(hostile)  # no two jobs share a file
    assert not os.path.exists("/tmp/absolute-escape-loss-time.png")
    assert (folder / "plain-id-eta.png").exists()  # an id tfonline made keeps its name
