"""The ETA's prior from a job's earlier runs (tfonline.estimator._prior). No TensorFlow."""

from __future__ import annotations

import logging
import math
import os
import sqlite3
import sys

import numpy as np
import pytest
from simulated import small_workload

from tfonline._eta import prior_for
from tfonline.estimator._prior import (CALIBRATION_WIDTH, CURVE_LOG_SD, MIN_RUNS, EarlierRun, IterationsPrior, Priors,
                                      earlier_runs)
from tfonline.report import collect, report_text
from tfonline.repository import Repository
from tfonline.simulator import Simulation
from tfonline.tuner import Tuning
from tfonline.tuner.history import JobHistory

EXPERIMENTS = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "experiments")
pytestmark = pytest.mark.fast  # no TensorFlow cluster: `pytest -m fast` runs these in under a minute


def test_a_prior_needs_two_earlier_runs_and_widens_their_spread_for_a_new_draw():
    assert MIN_RUNS == 2
    assert IterationsPrior.of([]) is None and IterationsPrior.of([1000]) is None
    assert IterationsPrior.of([1000, 0, None]) is None  # what is not a positive count is left out
    prior = IterationsPrior.of([1000, EarlierRun(1000)])
    assert prior.runs == 2 and prior.mean_log == pytest.approx(math.log(1000))
    assert prior.sd_log == pytest.approx(0.05 * math.sqrt(1.5))  # two equal runs: the floor, widened
    spread = IterationsPrior.of([800, 1000, 1250])
    logs = np.log([800, 1000, 1250])
    assert spread.sd_log == pytest.approx(np.std(logs, ddof=1) * math.sqrt(4 / 3))


def test_early_the_prior_decides_late_the_curve_and_a_run_past_every_earlier_one_keeps_the_curve():
    prior = IterationsPrior.of([90_000, 100_000, 110_000, 100_000])
    # at a tenth of the way, a curve 3x too high is pulled most of the way back to the earlier runs' 90,000 left
    early = prior.combine(10_000, 270_000.0)
    assert 90_000 < early < 130_000
    # at 95% of the way the iterations left are a small difference of large numbers: the curve decides
    late = prior.combine(95_000, 2_000.0)
    assert 2_000 < late < 4_000
    assert prior.left(95_000)[1] > 2 * CURVE_LOG_SD  # the curve weighs over 4x the prior
    # far past every earlier run: that run is not like them, the curve's answer stands
    assert prior.left(200_000) is None and prior.combine(200_000, 5_000.0) == 5_000.0
    # no curve (no decrease seen yet): the prior alone; the target reached: 0, whatever the prior says
    alone = prior.combine(10_000, None)
    assert 80_000 < alone < 100_000
    assert prior.combine(50_000, 0.0) == 0.0


def test_on_runs_like_the_earlier_ones_the_combined_answer_is_nearer_than_the_curves_at_every_quarter():
    """Fixed seed: totals log-normal with a 15% spread, the curve's answers off by a log-normal factor of its
    stated spread; over 400 runs, each with 5 earlier ones, the median error at 25 / 50 / 75% is smaller."""
    rng = np.random.default_rng(7)
    errors = {f: ([], []) for f in (0.25, 0.5, 0.75)}
    for _ in range(400):
        totals = np.exp(rng.normal(math.log(50_000), 0.15, size=6))
        prior, total = IterationsPrior.of(totals[:5]), totals[5]
        for f, (curve_errors, both_errors) in errors.items():
            done, actual = f * total, (1 - f) * total
            curve = actual * math.exp(rng.normal(0.0, CURVE_LOG_SD))
            curve_errors.append(abs(curve - actual) / actual)
            both_errors.append(abs(prior.combine(done, curve) - actual) / actual)
    for f, (curve_errors, both_errors) in errors.items():
        assert np.median(both_errors) < np.median(curve_errors), f


def test_the_prior_is_of_the_runs_on_the_current_worker_count_where_there_are_two_and_calibrates_on_all():
    """Two runs on one worker needed about 4,200 iterations, three on three about 6,600 (the CNN's shape): a run
    on one or three takes its own group's prior, on two (no group) the pooled one; every prior takes the curve's
    errors of all the runs; a run of another mode counts in the pool alone."""
    def run(n, workers, mode="async", bias=1.0):
        return EarlierRun(n, np.array([0.5 * n]), np.array([0.5 * n * bias]), layout=((0, workers),), mode=mode)

    earlier = [run(4_100, 1, bias=2.0), run(4_300, 1, bias=2.0), run(6_300, 3), run(6_600, 3), run(7_000, 3),
               run(9_000, 2, mode="sync"), run(9_500, 2, mode="sync")]
    priors = Priors.of(earlier, "async")
    assert priors.pooled.runs == 7 and priors.pooled.workers is None
    assert set(priors.by_workers) == {1, 3}  # the sync runs on two workers are another mode's
    one, three = priors.at(1), priors.at(3)
    assert (one.runs, one.workers, three.runs) == (2, 1, 3)
    assert one.mean_log == pytest.approx(np.mean(np.log([4_100, 4_300])))
    assert priors.at(2) is priors.pooled and priors.at(None) is priors.pooled
    assert one.errors == priors.pooled.errors and len(one.errors) == 7  # the curve calibrated on them all
    assert one.label() == "2 earlier runs on 1 worker" and three.label() == "3 earlier runs on 3 workers"
    assert priors.pooled.label() == "7 earlier runs"
    # early in a run on one worker whose curve is right, the answer is near its group's 4,200, not the pool's
    assert 3_000 < one.combine(420, 3_800.0) < 4_300 < priors.pooled.combine(420, 3_800.0)
    assert Priors.of([run(4_100, 1)]) is None
    # a run of unknown layout (an old repository's, or iterations alone) counts in the pool alone
    assert Priors.of([4_000, 4_400]).by_workers == {}


def test_an_earlier_runs_worker_count_is_the_one_it_ran_most_iterations_on():
    tuned = EarlierRun(1_000, layout=((0, 3), (100, 1), (300, 2), (800, 1)))  # 3: 100, 1: 200 + 200, 2: 500
    assert tuned.workers == 2
    assert [tuned.workers_at(k) for k in (0, 99, 100, 450, 999)] == [3, 3, 1, 2, 1]
    assert EarlierRun(1_000, layout=((0, 3), (500, 1))).workers == 1  # a tie: the fewer
    assert EarlierRun(1_000).workers is None and EarlierRun(1_000).workers_at(5) is None


def test_the_earlier_runs_are_the_converged_runs_of_the_job_to_its_target_with_their_curves_answers(tmp_path):
    repo = Repository(str(tmp_path / "r.db"))
    for job_id, name, status, target, started, iterations in [
            ("a", "J", "converged", 0.3, 1.0, 1000), ("b", "J", "converged", 0.3, 2.0, 1200),
            ("c", "J", "failed", 0.3, 3.0, 50), ("d", "J", "converged", 0.2, 4.0, 3000),
            ("e", "K", "converged", 0.3, 5.0, 9000), ("f", "J", "converged", 0.3, 6.0, 1100)]:
        repo.insert("jobs", {"id": job_id, "name": name, "status": status, "target_loss": target,
                             "started_at": started, "iterations": iterations})
    # a's answers: one from before version 14 (no prior_runs: the ETA was the curve's), then after
    repo.insert("estimates", {"job_id": "a", "step": 100, "estimator": "hogwild", "remaining_iterations": 950.0})
    repo.insert("estimates", {"job_id": "a", "step": 500, "estimator": "hogwild", "remaining_iterations": 480.0,
                              "curve_iterations": 700.0, "prior_runs": 2})
    # a later ETA from the earlier runs alone (the curve had no answer): no answer of the curve's
    repo.insert("estimates", {"job_id": "a", "step": 550, "estimator": "hogwild", "remaining_iterations": 450.0,
                              "prior_runs": 2})
    repo.insert("estimates", {"job_id": "a", "step": 600, "estimator": "loss-curve", "remaining_iterations": 1.0})
    # a ran 100 iterations on three workers, then 900 on one; b's setting is one no worker count can be read from
    for key, knobs in (("s3", '{"ps": 1, "worker": 3}'), ("s1", '{"ps": 2, "worker": 1}'), ("odd", "not json")):
        repo.insert("settings", {"id": key, "knobs": knobs, "short": key})
    for job_id, segment, setting, start in (("a", 0, "s3", 1), ("a", 1, "s1", 101), ("b", 0, "odd", 1)):
        repo.insert("segments", {"job_id": job_id, "segment": segment, "setting_id": setting, "start_step": start})
    repo.flush()
    runs = earlier_runs(repo, "J", 0.3, "hogwild")
    assert [r.iterations for r in runs] == [1000, 1200, 1100]  # oldest first
    assert list(runs[0].steps) == [100, 500] and list(runs[0].curve) == [950.0, 700.0]
    assert runs[1].steps.size == 0
    assert runs[0].layout == ((1, 3), (101, 1)) and runs[0].workers == 1 and runs[0].workers_at(50) == 3
    assert runs[1].layout == () and runs[1].workers is None and runs[2].workers is None
    fractions, logs = runs[0].log_errors()
    assert list(fractions) == [0.1, 0.5] and logs == pytest.approx([math.log(950 / 900), math.log(700 / 500)])
    assert [r.iterations for r in earlier_runs(repo, "J", 0.3, "hogwild", before=5.0)] == [1000, 1200]
    assert [r.iterations for r in earlier_runs(repo, "J", 0.3, None, exclude="b")] == [1000, 1100]
    prior = prior_for(repo, "f", "J", 0.3, "hogwild").pooled
    assert prior.runs == 2 and prior.mean_log == pytest.approx(np.mean(np.log([1000, 1200])))
    assert len(prior.errors) == 1  # b recorded no answer
    repo.close()


def test_the_curves_bias_on_the_earlier_runs_is_taken_out_near_the_same_fraction():
    """Earlier runs whose curve said twice the iterations left at about half way: this run's curve is read at
    half its answer there, its error their spread pooled with the curve's stated one; far from any answer, it
    stands as it is."""
    runs = [EarlierRun(n, np.array([0.45 * n, 0.5 * n, 0.55 * n]), 2 * np.array([0.55 * n, 0.5 * n, 0.45 * n]) * r)
            for n, r in ((10_000, 1.0), (11_000, 1.05), (9_000, 0.95))]
    prior = IterationsPrior.of(runs)
    bias, sd = prior.calibration(0.5)
    assert bias == pytest.approx(math.log(2), abs=0.01)
    # their spread (at least 0.05, widened for a new draw), pooled with the curve's stated error as from two runs
    spread = max(np.std(np.log([1.0, 1.05, 0.95]), ddof=1), 0.05) * math.sqrt(4 / 3)
    assert sd == pytest.approx(math.sqrt((3 * spread ** 2 + 2 * CURVE_LOG_SD ** 2) / 5))
    assert sd < CURVE_LOG_SD
    assert prior.calibration(0.55 + CALIBRATION_WIDTH + 0.01) == (0.0, CURVE_LOG_SD)  # past their last answer
    # half way through a run like them, a curve that says twice the 5,000 left: the answer is near 5,000
    assert 4_500 < prior.combine(5_000, 10_000.0) < 5_500
    # without the earlier answers, the same curve pulls the answer above by at least twice as much
    uncalibrated = IterationsPrior.of([10_000, 11_000, 9_000]).combine(5_000, 10_000.0)
    assert uncalibrated - 5_000 > 2 * abs(prior.combine(5_000, 10_000.0) - 5_000)


def test_a_repository_that_cannot_say_costs_the_prior_not_the_job(caplog):
    class Broken:
        def rows(self, sql, params=()):
            raise sqlite3.OperationalError("disk I/O error")

    with caplog.at_level(logging.WARNING, logger="tfonline"):
        assert prior_for(Broken(), "x", "J", 0.3, "hogwild") is None
    assert "the ETA goes on without the job's earlier runs: OperationalError: disk I/O error" in caplog.text


def _estimates(db: str, job_id: str) -> list[tuple[int, float]]:
    return sqlite3.connect(db).execute("select step, remaining_iterations from estimates where job_id = ? and "
                                       "remaining_iterations is not null order by step", (job_id,)).fetchall()


def test_a_simulated_jobs_eta_takes_its_earlier_runs(tmp_path):
    """One seed's job alone, and after three runs of other seeds on the same repository: the same iterations,
    and over the first half of the run the ETA of the second is nearer the iterations actually left."""
    workload = small_workload()
    alone_db, after_db = str(tmp_path / "alone.db"), str(tmp_path / "after.db")
    after = Repository(after_db)
    for seed in (0, 1, 2):
        assert Simulation(workload, after, workload.default_setting(), tuning=None, seed=seed).run()[0] == "converged"
    runs = {}
    for db, repo in ((alone_db, Repository(alone_db)), (after_db, after)):
        run = Simulation(workload, repo, workload.default_setting(), tuning=None, seed=3)
        assert run.run()[0] == "converged"
        repo.close()
        runs[db] = run
    steps = runs[alone_db].state.step
    assert runs[after_db].state.step == steps
    errors = {}
    for db, run in runs.items():
        first_half = [(step, left) for step, left in _estimates(db, run.job_id) if step <= steps / 2]
        assert len(first_half) >= 3
        errors[db] = np.median([abs(left - (steps - step)) / (steps - step) for step, left in first_half])
    assert errors[after_db] < errors[alone_db], errors
    # the display names what the ETA took
    assert runs[after_db].progress.status().estimator == (f"hogwild + 3 earlier runs on "
                                                          f"{workload.default_setting()['worker']} workers")
    assert runs[alone_db].progress.status().estimator == "hogwild"
    # and so does the report
    for db, took in ((after_db, 3), (alone_db, 0)):
        repo = Repository(db, create=False)
        report = collect(repo, next(j for j in repo.jobs() if j["id"] == runs[db].job_id))
        assert report["eta_earlier_runs"] == took
        assert ("it took 3 earlier runs of the job" in report_text(repo, [report])) == bool(took)
        repo.close()


def _tuned_runs(folder, count: int, hear: bool = True) -> list[float]:
    """``count`` tuned simulated runs one after another on ``folder``'s repository (``hears.db``, or ``deaf.db``
    without ``hear``), each one's median error of the tuner's estimated share of its time at its decisions, as
    ``benchmarks/experiments/tuner_eta.py`` measures them."""
    sys.path.insert(0, EXPERIMENTS)
    try:
        import tuner_eta
    finally:
        sys.path.remove(EXPERIMENTS)
    rows = tuner_eta.runs(small_workload(), count, hear, str(folder))
    assert all(r["status"] == "converged" and r["decisions"] for r in rows)
    return [r["share_error"] for r in rows]


def test_a_tuned_job_with_earlier_runs_judges_how_far_along_it_is_by_its_eta(tmp_path):
    """Five tuned runs one after another on one repository: from the third, the ETA takes the earlier runs,
    and the tuner's estimated share of the job's time at its decisions is nearer the share each was in fact at
    than that of the same runs with the tuner deaf to the ETA (its length from the latest R̂ alone)."""
    deaf = _tuned_runs(tmp_path, 5, hear=False)
    hears = _tuned_runs(tmp_path, 5)
    assert all(h < d for h, d in zip(hears[2:], deaf[2:])), (deaf, hears)


def test_a_tuner_that_fails_to_take_the_etas_answer_costs_that_not_the_eta(tmp_path, monkeypatch, caplog):
    _tuned_runs(tmp_path, 2)
    db = str(tmp_path / "hears.db")

    def fails(self, step, left):
        raise RuntimeError("broken")

    monkeypatch.setattr(JobHistory, "eta_answered", fails)
    workload, repo = small_workload(), Repository(db)
    run = Simulation(workload, repo, workload.default_setting(), seed=2, tuning=Tuning(min_segment_s=2.0, resume=False))
    with caplog.at_level(logging.WARNING, logger="tfonline"):
        assert run.run()[0] == "converged"
    repo.close()
    warned = [r.getMessage() for r in caplog.records if "the tuner no longer reads the ETA" in r.getMessage()]
    assert warned == ["the tuner no longer reads the ETA: RuntimeError: broken"]
    estimates = _estimates(db, run.job_id)
    workers = workload.default_setting()["worker"]
    assert len(estimates) >= 3 and run.progress.source() == f"hogwild + 2 earlier runs on {workers} workers"
