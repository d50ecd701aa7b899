"""A long job's report reads its iterations in runs, not one by one: ``benchmarks/report_size.py`` at a small size."""

from __future__ import annotations

import os
import sqlite3
import sys

import pytest

from tfonline.report.plots import BUCKETS, EXACT_POINTS, series
from tfonline.repository import Repository

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "benchmarks"))
import report_size  # noqa: E402

# the marked tests start no cluster; the report-size benchmark builds its repositories (seconds): not in `-m fast`
fast = pytest.mark.fast


@fast
def test_a_long_jobs_series_is_runs_of_iterations_that_keep_every_extreme(tmp_path):
    db = str(tmp_path / "long.db")
    job_id = report_size.build(db, 20_000)
    repo = Repository(db, create=False)
    data = series(repo, job_id)
    repo.close()
    runs = data["iterations"]
    assert data["decimated"] and BUCKETS // 2 < len(runs) <= BUCKETS
    assert all(r["loss_low"] <= r["loss"] <= r["loss_high"] for r in runs)
    steps, walls = [r["step"] for r in runs], [r["wall_time"] for r in runs]
    assert steps == sorted(steps) and walls == sorted(walls) and steps[0] < 20 and steps[-1] > 19_980
    low, high = sqlite3.connect(db).execute("select min(loss), max(loss) from iterations").fetchone()
    assert min(r["loss_low"] for r in runs) == low and max(r["loss_high"] for r in runs) == high
    assert len(data["reconfigurations"]) == 30 and all(m["smoothed_loss"] is not None
                                                       for m in data["reconfigurations"])


@fast
def test_a_short_jobs_series_is_every_iteration(tmp_path):
    db = str(tmp_path / "short.db")
    job_id = report_size.build(db, EXACT_POINTS)
    repo = Repository(db, create=False)
    data = series(repo, job_id)
    repo.close()
    assert not data["decimated"] and [r["step"] for r in data["iterations"]] == list(range(1, EXACT_POINTS + 1))


def test_the_benchmark_measures_each_report_and_prints_the_targets(capsys):
    results = report_size.main(["--iterations", "20000"])
    assert set(results) == {"text", "json", "html"} and all(s > 0 and mb > 10 for s, mb in results.values())
    out = capsys.readouterr().out
    assert "repository of one job with 20,000 iterations built" in out
    assert "html" in out and "< 3 s, < 300 MB" in out
