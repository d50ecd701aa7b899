"""Estimators on real jobs: a third-party plug-in used by a job, and both built-ins on a real LogR run."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest
from jobs import SlowerLogR, TinyLogR
from test_estimator import _install_distribution, site  # noqa: F401  (the fixture)

from tfonline.estimator import get_estimator
from tfonline.exceptions import ConfigurationError


@pytest.fixture(scope="module")
def real_run(cluster, tmp_path_factory):
    db = str(tmp_path_factory.mktemp("est") / "runs.db")
    result = SlowerLogR().run(db=db, cluster=cluster, mode="sync", quiet=True)
    assert result.status == "converged", result.stop_reason
    rows = sqlite3.connect(db).execute("select step, loss, smoothed_loss from iterations order by step").fetchall()
    return db, result, np.array(rows, dtype=float)


@pytest.mark.parametrize("name", ["hogwild", "loss-curve"])
def test_estimates_on_a_real_run_match_the_iterations_needed(real_run, name):
    """Half-way and three quarters through a real run, the estimate is finite and of the right order of magnitude."""
    _, result, rows = real_run
    n = result.iterations
    assert n >= 100
    for fraction in (0.5, 0.75):
        cut = int(n * fraction)
        est = get_estimator(name).fit(rows[:cut, 0], rows[:cut, 1])
        predicted = est.remaining_iterations(rows[cut - 1, 2], SlowerLogR.target_loss)
        assert predicted is not None, est.reason
        ratio = predicted / (n - cut)
        print(f"{name}: at step {cut} of {n}, predicted {predicted:.0f} left, actual {n - cut}, ratio {ratio:.2f}")
        assert 0.1 < ratio < 10  # the order of magnitude


def test_the_job_records_its_estimates(real_run):
    db, result, _ = real_run
    rows = sqlite3.connect(db).execute(
        "select step, estimator, remaining_iterations, remaining_s from estimates order by step").fetchall()
    assert rows and {r[1] for r in rows} == {"hogwild"}
    assert all(r[2] is None or (r[2] >= 0 and r[3] >= 0) for r in rows)
    assert any(r[2] is not None for r in rows)


def test_a_job_uses_a_third_party_estimator(site, cluster, db_path):  # noqa: F811
    """Its answers are recorded; and a fit that takes 0.1 s of CPU makes the job estimate at most every 5 s, so
    that estimates take at most 2% of the driver's time (one a second otherwise)."""
    _install_distribution(site, "thirdparty-eta", "halfway = thirdparty_eta:Halfway", module=(
        "import time\n"
        "from tfonline.estimator import BaseEstimator\n"
        "class Halfway(BaseEstimator):\n"
        "    name = 'halfway'\n"
        "    min_points = 2\n"
        "    def _fit(self, segment):\n"
        "        started = time.thread_time()\n"
        "        while time.thread_time() - started < 0.1:\n"
        "            pass\n"
        "        self.t = float(segment.t[-1])\n"
        "    def _remaining(self, current, target):\n"
        "        return self.t, None\n"))
    # A job of a fixed 6 s: SlowerLogR converges in about a second here, which could end before the first
    # estimate (a full smoothing window, then the first estimate).
    job = SlowerLogR()
    job.target_loss = 1e-6
    result = job.run(db=db_path, cluster=cluster, estimator="halfway", quiet=True, max_seconds=6, patience=None)
    assert result.stop_reason == "max_seconds (6 s) reached"
    rows = sqlite3.connect(db_path).execute("select step, estimator, remaining_iterations from estimates").fetchall()
    assert rows and all(name == "halfway" for _, name, _ in rows)
    assert len(rows) <= 2  # 6 s, and the second estimate starts 5 s after the first at the earliest
    answered = [(step, remaining) for step, _, remaining in rows if remaining is not None]
    # Its answer is the segment's last usable step (one segment, so t is the global step). Cleaning may drop
    # the latest loss as an outlier, so that step is a recorded one at or before the estimate's step.
    recorded = {s for (s,) in sqlite3.connect(db_path).execute("select step from iterations")}
    assert answered and all(remaining <= step and remaining in recorded for step, remaining in answered)


def test_an_unknown_estimator_fails_before_anything_starts(db_path):
    with pytest.raises(ConfigurationError, match="unknown estimator 'psychic'; known estimators: hogwild, loss-curve"):
        TinyLogR().run(db=db_path, estimator="psychic", quiet=True)
