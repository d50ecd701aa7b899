"""The estimate-quality tool on a repository whose oracle is known. No TensorFlow."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tfonline.cli import main
from tfonline.estimator._quality import estimate_quality, load_runs
from tfonline.exceptions import ConfigurationError
from tfonline.repository import Repository


pytestmark = pytest.mark.fast  # no TensorFlow cluster: `pytest -m fast` runs these in under a minute


def _fake_runs(db_path, per_iteration_s=(0.02, 0.01, 0.04, 0.03), alpha=40.0, l0=0.7, target=0.25, seed=0,
               one_after_another=False):
    """Runs that follow the same convergence curve at different speeds per iteration; all started at once, or
    ``one_after_another``, each then with the ETA's answers it recorded: every 10 iterations, twice the
    iterations it had left (a curve that says twice too many)."""
    rng = np.random.default_rng(seed)
    repo = Repository(db_path)
    losses = np.linspace(l0, target, 2000)
    steps = np.round(alpha / losses * np.log(l0 / losses)) + 1
    steps, first = np.unique(steps, return_index=True)
    curve = np.interp(np.arange(1, steps[-1] + 1), steps, losses[first])
    for i, p in enumerate(per_iteration_s):
        job_id = f"run{i}"
        repo.insert("settings", {"id": f"s{i}", "knobs": "{}", "short": f"setting {i}"}, replace=True)
        repo.insert("jobs", {"id": job_id, "name": "Fake", "status": "converged", "target_loss": target,
                             "started_at": float(i) if one_after_another else 0.0, "mode": "async",
                             "iterations": int(curve.size)})
        if one_after_another:
            for k in range(10, curve.size, 10):
                repo.insert("estimates", {"job_id": job_id, "step": k, "estimator": "hogwild", "loss": float(curve[k]),
                                          "remaining_iterations": 2.0 * (curve.size - k),
                                          "curve_iterations": 2.0 * (curve.size - k), "prior_runs": 0})
        noisy = curve * (1 + 0.01 * rng.standard_normal(curve.size))
        for k, loss in enumerate(noisy, start=1):
            repo.insert("iterations", {"job_id": job_id, "step": k, "worker": 0, "setting_id": f"s{i}", "segment": 0,
                                       "exec_time_s": p, "loss": float(loss), "smoothed_loss": float(curve[k - 1]),
                                       "wall_time": 100.0 + k * p})
    repo.insert("jobs", {"id": "failed", "name": "Fake", "status": "failed", "target_loss": target, "started_at": 0.0})
    repo.close()


def test_the_estimators_pick_the_fastest_setting_when_curves_are_equal(db_path):
    _fake_runs(db_path)
    runs = load_runs(Repository(db_path, create=False), "Fake")
    assert len(runs) == 4  # the failed run is left out
    for name in ("hogwild", "loss-curve"):
        quality = estimate_quality(runs, name, segment=40)
        assert quality.picks >= 3
        assert quality.rank == 1.0  # the oracle's best: setting 1, 0.01 s per iteration
    hog = estimate_quality(runs, "hogwild", segment=40)
    for fraction in (0.25, 0.5, 0.75):
        error = hog.median_relative_error[fraction]
        assert error is not None and 0 <= error < 1.0 and math.isfinite(error)


def test_cli_prints_a_row_per_estimator(db_path, capsys):
    _fake_runs(db_path)
    assert main(["estimate-quality", db_path, "--job", "Fake", "--segment", "50"]) == 0
    out = capsys.readouterr().out
    assert "estimator quality for Fake: 4 converged runs, segments of 50 iterations" in out
    rows = [line.split() for line in out.splitlines()[2:4]]
    assert [r[0] for r in rows] == ["hogwild", "loss-curve"] and all(r[1] == "1.00" for r in rows)
    # the runs all started at once and recorded no estimates: no earlier runs, and no ETA to read back
    assert out.splitlines()[4] == ("  the ETA as the runs showed it, hogwild with the job's earlier runs: - / - / - "
                                   "(hogwild's recorded answers alone: - / - / -; 0 of 4 runs had 2 or more before them)")


def test_the_eta_row_reads_what_the_runs_recorded_and_takes_the_runs_before_each(db_path, capsys):
    """Four runs of one curve, one after another, whose recorded answers said twice the iterations left: alone
    they are off by 100%; the last two runs, with two and three before them, have that bias taken out, so the
    ETA's median error over the four is well under it."""
    _fake_runs(db_path, one_after_another=True)
    assert main(["estimate-quality", db_path, "--job", "Fake", "--segment", "50", "--estimator", "hogwild"]) == 0
    eta_line = capsys.readouterr().out.splitlines()[3]
    head, alone = eta_line.split(" (hogwild's recorded answers alone: ")
    assert alone == "1.00 / 1.00 / 1.00; 2 of 4 runs had 2 or more before them)", eta_line
    eta = [float(x) for x in head.split(": ")[1].split(" / ")]
    assert all(e < 0.6 for e in eta), eta_line

def test_too_few_runs_and_bad_segment(db_path, capsys):
    _fake_runs(db_path, per_iteration_s=(0.01,))
    assert main(["estimate-quality", db_path, "--job", "Fake"]) == 1
    assert "estimate-quality needs at least 2 converged runs of the job, got 1" in capsys.readouterr().err
    runs = load_runs(Repository(db_path, create=False), "Fake") * 2
    with pytest.raises(ConfigurationError, match="segment must be an integer >= 2, got 1"):
        estimate_quality(runs, "hogwild", segment=1)


def test_a_runs_smoothing_window_is_read_off_its_recorded_losses(db_path):
    """The quality measure counts iterations until the smoothed loss crosses the target, so it needs the
    run's smoothing window: the recorded smoothed losses follow the driver's exponential average."""
    from tfonline._state import SmoothedLoss
    from tfonline.estimator._quality import Run

    losses = 0.5 + 0.1 * np.random.default_rng(0).standard_normal(400)
    for window in (5, 30, 50):
        average = SmoothedLoss(window)
        smoothed = np.array([average.add(loss) for loss in losses])
        steps = np.arange(1, 401, dtype=float)
        assert Run("j", "", 0.4, steps, losses, smoothed, steps).smoothing_window == window
    # smoothed losses that are no exponential average of the losses: no window
    assert Run("j", "", 0.4, steps, losses, np.linspace(0.6, 0.4, 400), steps).smoothing_window is None
    _fake_runs(db_path)
    repo = Repository(db_path)
    assert {run.smoothing_window for run in load_runs(repo, "Fake")} == {None}
    repo.close()


def test_the_eta_read_back_takes_the_prior_of_the_runs_on_the_workers_the_run_then_had(tmp_path):
    """Two earlier runs on one worker needed 1,000 iterations, two on three 2,000 (none recorded answers); a run
    on three workers whose answers said 1.3x the iterations left: at a quarter of the way its ETA is within 2% of
    the truth with the three-worker runs' prior, and pulled off by the prior of all four (whose median is
    1,414) when no run's layout is recorded."""
    from tfonline.estimator._quality import eta_errors, load_run

    errors = {}
    for layouts in (True, False):
        db = str(tmp_path / f"layouts-{layouts}.db")
        repo = Repository(db)
        for key, workers in (("w1", 1), ("w3", 3)):
            repo.insert("settings", {"id": key, "knobs": f'{{"ps": 1, "worker": {workers}}}', "short": key})
        for i, (job_id, iterations, setting) in enumerate((("a", 1000, "w1"), ("b", 2000, "w3"), ("c", 1000, "w1"),
                                                           ("d", 2000, "w3"), ("run", 2000, "w3"))):
            repo.insert("jobs", {"id": job_id, "name": "J", "status": "converged", "target_loss": 0.1,
                                 "started_at": float(i), "mode": "async", "iterations": iterations})
            if layouts:
                repo.insert("segments", {"job_id": job_id, "segment": 0, "setting_id": setting, "start_step": 1})
        for k in range(1, 2001):
            repo.insert("iterations", {"job_id": "run", "step": k, "worker": 0, "setting_id": "w3", "segment": 0,
                                       "exec_time_s": 0.01, "loss": 1.0 / k, "smoothed_loss": 1.0 / k,
                                       "wall_time": 0.01 * k})
        for k in range(100, 2000, 100):
            repo.insert("estimates", {"job_id": "run", "step": k, "estimator": "hogwild", "prior_runs": 0,
                                      "remaining_iterations": 1.3 * (2000 - k), "curve_iterations": 1.3 * (2000 - k)})
        repo.flush()
        rated = eta_errors(repo, load_run(repo, "run"), "hogwild")
        assert rated["earlier_runs"] == 4 and rated["recorded_error"][0.25] == pytest.approx(0.3)
        errors[layouts] = rated["relative_error"][0.25]
        repo.close()
    assert errors[True] < 0.02 and errors[False] > 0.05, errors  # measured: 0.009 and 0.084
