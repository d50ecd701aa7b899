"""The simulator: its models, a simulated job written to the repository, the calibration, the commands."""

from __future__ import annotations

import json
import random
import sqlite3
import subprocess
import sys

import numpy as np
import pytest
from simulated import THETA, small_workload

from tfonline.cli import main
from tfonline.exceptions import ConfigurationError
from tfonline.repository import Repository
from tfonline.simulator import FEATURES, LossCurve, Simulation, SpeedModel, Workload, features, fixed_runs
from tfonline.simulator.calibrate import calibrate
from tfonline.tuner import Tuning
from tfonline.tuner.manager import OVERHEAD_SHARE

# the marked tests start no TensorFlow cluster and take at most about 2 s each; the others run a whole
# simulated tuned job with its GP fits (seconds here): in `make test`, not in the inner loop (`pytest -m fast`)
fast = pytest.mark.fast

# The simulated job of the repository tests: about 18,000 iterations, room for several online decisions even when
# the first GP fit takes 1.4 s of CPU (measured, in a fresh process), after which the next segment lasts until the
# tuner is within its 2% share: 70 s of the job's simulated 200 s. At a third of this length (simulated.LONG), a
# slow first fit left 1-3 online decisions.
JOB_CURVE = LossCurve(b0=1 / 1200, b1=2.0, b2=0.3)
QUICK_TUNING = Tuning(initial_iterations=20, random_settings=2, segment_iterations=60, min_segment_s=0,
                      exploration_budget=None, resume=False)


@fast
def test_the_speed_model_is_optimus_form_plus_threads_crowding_and_xla():
    s = {"ps": 2, "worker": 3, "intra_op_parallelism_threads": 2, "inter_op_parallelism_threads": 1,
         "global_jit_level": "ON_2"}
    assert dict(zip(FEATURES, features(s, hosts=1, cores=2))) == {
        "base": 1.0, "w/p": 1.5, "w": 3, "p": 2, "1/intra": 0.5, "1/inter": 1.0, "crowding": 2.0,
        "jit:ON_1": 0.0, "jit:ON_2": 3.0}  # XLA's extra work: each of the 3 workers on the host does it
    model = SpeedModel(THETA, hosts=1, cores=2)
    assert model.iteration_s(s) == pytest.approx(model.step_s(s) / 3)  # asynchronous workers step side by side
    sync = SpeedModel(THETA, hosts=1, cores=2, sync=True)
    assert sync.iteration_s(s) == pytest.approx(sync.step_s(s))
    # Spread over more hosts, the workers no longer crowd one host's cores.
    spread = dict(zip(FEATURES, features(s, hosts=3, cores=2)))
    assert spread["crowding"] == 0.0 and spread["jit:ON_2"] == 1.0


@fast
def test_the_fit_recovers_the_model_that_made_the_times():
    rng = random.Random(3)
    space = small_workload().space()
    truth = SpeedModel(THETA, hosts=1, cores=2)
    settings = [space.sample(rng) for _ in range(40)]
    exact = SpeedModel.fit([(s, truth.iteration_s(s)) for s in settings], hosts=1, cores=2)
    assert np.allclose(exact.theta, THETA, rtol=1e-6, atol=1e-9)
    noise = np.random.default_rng(0)
    noisy = SpeedModel.fit([(s, truth.iteration_s(s) * (1 + 0.05 * noise.standard_normal())) for s in settings],
                           hosts=1, cores=2)
    unseen = [space.sample(rng) for _ in range(20)]
    errors = [abs(noisy.iteration_s(s) / truth.iteration_s(s) - 1) for s in unseen]
    assert max(errors) < 0.15 and np.median(errors) < 0.05


@fast
def test_bad_models_are_refused_with_what_was_expected():
    with pytest.raises(ConfigurationError, match=r"theta must be 9 numbers >= 0 \(base, w/p, .*\), got \[1.0\]"):
        SpeedModel([1.0], hosts=1, cores=2)
    with pytest.raises(ConfigurationError, match="a loss curve needs b0 > 0"):
        LossCurve(b0=0, b1=1, b2=0)
    with pytest.raises(ConfigurationError, match="a speed model needs at least 2 runs to fit, got 1"):
        SpeedModel.fit([({}, 1.0)], hosts=1, cores=2)


@fast
def test_the_loss_curve_has_staleness_and_its_inverse():
    curve = LossCurve(b0=1 / 100, b1=2.0, b2=0.3, staleness=0.1)
    assert curve.loss(curve.progress_to(0.4)) == pytest.approx(0.4)
    assert curve.progress_to(0.3) == float("inf")  # the floor is never reached
    one, four = ({"worker": w} for w in (1, 4))
    assert curve.progress_per_iteration(one, sync=False) == 1.0
    assert curve.progress_per_iteration(four, sync=False) == pytest.approx(1 / 1.3)  # staler gradients
    assert curve.progress_per_iteration(four, sync=True) == pytest.approx(2.5)  # a larger batch


@fast
def test_staleness_can_grow_as_the_loss_nears_its_floor_and_fixed_runs_follow_it():
    """staleness·(1 + growth·f), f the share of the way to the floor covered: 4 workers lose progress per
    iteration along the job, 1 worker does not; a fixed run's iterations to the target count it."""
    growing = LossCurve(b0=1 / 100, b1=2.0, b2=0.3, staleness=0.1, staleness_growth=4.0)
    one, four = ({"worker": w} for w in (1, 4))
    paces = [growing.progress_per_iteration(four, False, p) for p in (0.0, 100.0, 1000.0, float("inf"))]
    assert paces[0] == pytest.approx(1 / 1.3) and paces[-1] == pytest.approx(1 / (1 + 0.1 * 5 * 3))
    assert paces == sorted(paces, reverse=True)
    assert growing.progress_per_iteration(one, False, float("inf")) == 1.0
    steady = LossCurve(b0=1 / 100, b1=2.0, b2=0.3, staleness=0.1)
    workloads = [small_workload(curve=c) for c in (steady, growing)]
    setting = dict(workloads[0].default_setting(), worker=4)
    steady_run, growing_run = (fixed_runs(w, [setting], seed=0)[0] for w in workloads)
    assert steady_run.status == growing_run.status == "converged"
    assert growing_run.iterations > 1.2 * steady_run.iterations


@pytest.fixture(scope="module")
def simulated_db(tmp_path_factory):
    db = str(tmp_path_factory.mktemp("sim") / "runs.db")
    repo = Repository(db)
    workload = small_workload(curve=JOB_CURVE)
    start = dict(workload.default_setting(), global_jit_level="ON_2")  # a slow start: tuning pays
    tuned = Simulation(workload, repo, start, tuning=QUICK_TUNING, seed=1)
    fixed = Simulation(workload, repo, start, tuning=None, seed=1)
    outcomes = (tuned.run(), fixed.run())
    repo.close()
    return db, tuned, fixed, outcomes


def test_a_simulated_job_writes_the_repository_a_real_one_does(simulated_db, capsys):
    db, tuned, fixed, (tuned_outcome, fixed_outcome) = simulated_db
    assert tuned_outcome[0] == fixed_outcome[0] == "converged"
    conn = sqlite3.connect(db)
    count = dict(conn.execute("select job_id, count(*) from iterations group by job_id").fetchall())
    assert count == {tuned.job_id: tuned.state.step, fixed.job_id: fixed.state.step}
    job = dict(zip(["status", "tuned", "tf_version", "iterations", "completion"], conn.execute(
        "select status, tuned, tf_version, iterations, completion_time_s from jobs where id = ?",
        (tuned.job_id,)).fetchone()))
    assert job["status"] == "converged" and job["tuned"] == 1 and job["tf_version"] == "simulated"
    assert job["completion"] == pytest.approx(tuned.clock.now - tuned.started_at)  # the simulated clock
    phases = [p for (p,) in conn.execute("select phase from phases where job_id = ? order by start_step",
                                         (tuned.job_id,))]
    assert phases[:2] == ["initial", "random"]
    moves = conn.execute("select technique, cost_s from reconfigurations where job_id = ?", (tuned.job_id,)).fetchall()
    assert moves and all(technique and cost > 0 for technique, cost in moves)
    assert conn.execute("select count(*) from decisions where job_id = ?", (tuned.job_id,)).fetchone()[0] >= 3
    assert conn.execute("select count(*) from estimates where job_id = ?", (tuned.job_id,)).fetchone()[0] >= 1
    assert main(["report", db, "--job", tuned.job_id]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"job {tuned.job_id} (SmallJob, async)") and "decisions:" in out and "random " in out


def test_the_tuners_decisions_take_at_most_their_share_of_the_simulated_job(simulated_db):
    """The decisions' CPU time passes on the simulated clock; with the default share (2%) they take at most that
    of the job, give or take the last one, and the decisions between two fits of the GP do not fit it again.

    How much cheaper such a decision is than a fit is a speed figure, left to the benchmark's overhead column: a
    ratio of two CPU times of a few hundredths of a second each failed on CI's machine (0.046 s against 0.078 s)."""
    db, tuned, _, _ = simulated_db
    conn = sqlite3.connect(db)
    costs = [c for (c,) in conn.execute("select overhead_s from decisions where job_id = ? and phase = 'online' "
                                        "order by step", (tuned.job_id,))]
    total = conn.execute("select sum(overhead_s) from decisions where job_id = ?", (tuned.job_id,)).fetchone()[0]
    assert total == pytest.approx(tuned.manager.overhead_s)
    assert total <= OVERHEAD_SHARE * (tuned.clock.now - tuned.started_at) + max(costs)
    # each fit is recorded (a later job of the same workload starts from the latest), at its decision's cost
    fits = conn.execute("select f.cost_s, d.overhead_s, f.hyperparameters from gp_fits f join decisions d "
                        "on d.job_id = f.job_id and d.step = f.step where f.job_id = ?", (tuned.job_id,)).fetchall()
    assert 1 <= len(fits) < len(costs) and all(cost == overhead for cost, overhead, _ in fits)
    assert all(len(json.loads(h)) > 5 for _, _, h in fits)
    # most online decisions take the latest fit's hyperparameters: they record no fit
    assert len(costs) - len(fits) >= 3, (costs, fits)


def test_the_simulated_clock_is_the_models_time_and_fixed_runs_agree_with_the_loop(simulated_db):
    db, tuned, fixed, _ = simulated_db
    workload = small_workload(curve=JOB_CURVE)
    conn = sqlite3.connect(db)
    knobs = dict(conn.execute("select id, knobs from settings").fetchall())
    # From the first iteration to the last: each setting's iterations at its modelled pace, and the switches.
    per_setting = conn.execute("select setting_id, count(*) from iterations where job_id = ? group by setting_id",
                               (tuned.job_id,)).fetchall()
    modelled = sum(n * workload.speed.iteration_s(json.loads(knobs[s])) for s, n in per_setting)
    switches = conn.execute("select sum(cost_s) from reconfigurations where job_id = ?", (tuned.job_id,)).fetchone()[0]
    first, last = conn.execute("select min(wall_time), max(wall_time) from iterations where job_id = ?",
                               (tuned.job_id,)).fetchone()
    assert len(per_setting) >= 2 and switches > 0
    assert last - first == pytest.approx(modelled + switches, rel=0.02)  # 5% noise per iteration, averaged
    # The array version of a fixed run (fixed_runs) and the loop agree, up to their noise.
    fixed_s = fixed.clock.now - fixed.started_at
    [outcome] = fixed_runs(workload, [fixed.state.setting], seed=5)
    assert outcome.status == "converged"
    assert outcome.completion_s == pytest.approx(fixed_s, rel=0.1)
    assert outcome.iterations == pytest.approx(fixed.state.step, rel=0.1)


def _as_real_runs(db: str) -> None:
    """Marks simulated fixed runs as real ones, so the calibration takes them (it leaves simulated jobs out)."""
    conn = sqlite3.connect(db)
    conn.execute("update jobs set tf_version = '2.x' where tuned = 0")
    conn.commit()
    conn.close()


@fast
def test_the_calibration_recovers_the_model_and_reports_its_held_out_error(tmp_path, capsys):
    db = str(tmp_path / "fixed.db")
    repo = Repository(db)
    workload = small_workload()
    rng = random.Random(11)
    space = workload.space({"global_jit_level": "OFF"})
    for seed in range(12):
        Simulation(workload, repo, space.sample(rng), tuning=None, seed=seed, max_seconds=20).run()
    repo.close()
    _as_real_runs(db)
    repo = Repository(db, create=False)
    result = calibrate(repo, hosts=1, cores=2, holdout=0.25)
    repo.db.conn.close()
    assert len(result.fitted) == 9 and len(result.held_out) == 3
    held = result.to_dict()["held_out_error"]
    assert held["max_abs"] < 0.1  # 5% noise per iteration, averaged over hundreds
    assert result.workload.speed.iteration_s(workload.default_setting()) == pytest.approx(
        workload.speed.iteration_s(workload.default_setting()), rel=0.1)
    out = tmp_path / "model.json"
    assert main(["calibrate", db, "--cores", "2", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "SmallJob: speed model fitted on 9 runs, checked on 3 held out" in text
    assert "error, held-out runs: median " in text
    model = json.loads(out.read_text())
    assert set(model["speed"]["theta"]) == set(FEATURES) and model["held_out_runs"]
    assert main(["simulate", "--model", str(out), "--db", str(tmp_path / "sim.db"), "--random-settings", "4",
                 "--min-segment-s", "5"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("SmallJob (async) on 4 simulated nodes; 4 random fixed settings")
    assert "average / tfonline " in text and "tfonline report " in text


def _model_json(**changes) -> dict:
    """What tfonline calibrate --out writes, for the small workload."""
    from tfonline.simulator.calibrate import Calibration

    return Calibration(small_workload(**changes), [], []).to_dict()


@fast
def test_command_errors_are_one_line(tmp_path, capsys):
    """The first through the command itself (a process of its own); the others through its ``main``, which
    prints them (a process each took 1 s)."""
    from tfonline.cli import main

    def error(*argv):
        assert main(list(argv)) == 1
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1, lines
        return lines[0]

    empty = str(tmp_path / "empty.db")
    Repository(empty).close()
    out = subprocess.run([sys.executable, "-m", "tfonline.cli", "calibrate", empty], capture_output=True, text=True)
    assert out.returncode == 1 and out.stderr.strip().splitlines() == [
        "tfonline: error: calibrate needs at least 4 fixed-setting runs (untuned, one setting, >= 30 iterations) "
        "of one job, got 0"]
    assert error("calibrate", empty, "--holdout", "1.5") == "tfonline: error: holdout must be a fraction in [0, 1), got 1.5"
    assert error("calibrate", empty, "--cores", "0") == "tfonline: error: --cores must be >= 1, got 0"
    assert error("calibrate", empty, "--hosts", "-2") == "tfonline: error: --hosts must be >= 1, got -2"
    mixed = str(tmp_path / "mixed.db")
    repo = Repository(mixed)
    for sync in (False, True):
        workload = small_workload(speed=SpeedModel(THETA, hosts=1, cores=2, sync=sync))
        Simulation(workload, repo, workload.default_setting(), tuning=None, max_seconds=5).run()
    repo.close()
    _as_real_runs(mixed)
    assert error("calibrate", mixed) == ("tfonline: error: calibrate takes the runs of one mode, got "
                                         "['async', 'sync'] for 'SmallJob'")
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert error("simulate", "--model", str(bad)).startswith(
        f"tfonline: error: --model must be a JSON file written by tfonline calibrate --out, got '{bad}': KeyError")
    floor = tmp_path / "floor.json"
    floor.write_text(json.dumps(_model_json(target_loss=0.2)))
    assert error("simulate", "--model", str(floor)) == (
        "tfonline: error: --model's loss curve must reach its target_loss 0.2, got a floor of 0.3: calibrate on "
        "runs that reached the target")
    assert error("simulate", "--random-settings", "0") == "tfonline: error: --random-settings must be >= 1, got 0"
    assert error("simulate", "--min-segment-s", "-1") == "tfonline: error: --min-segment-s must be >= 0, got -1.0"


def test_the_simulator_does_not_import_tensorflow(tmp_path):
    code = ("import sys; sys.path.insert(0, sys.argv[2]); from test_simulator import small_workload, QUICK_TUNING; "
            "from tfonline.repository import Repository; from tfonline.simulator import Simulation; "
            "repo = Repository(sys.argv[1]); w = small_workload(); "
            "print(Simulation(w, repo, w.default_setting(), tuning=QUICK_TUNING).run()); repo.close(); "
            "assert 'tensorflow' not in sys.modules, 'the simulator imported TensorFlow'")
    import os

    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "r.db"), os.path.dirname(__file__)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "converged" in out.stdout


@fast
def test_a_synchronous_job_records_one_iteration_per_step_of_all_workers(tmp_path):
    db = str(tmp_path / "sync.db")
    repo = Repository(db)
    workload = small_workload(speed=SpeedModel(THETA, hosts=1, cores=2, sync=True))
    three, one = (dict(workload.default_setting(), worker=w) for w in (3, 1))
    runs = [Simulation(workload, repo, s, tuning=None, seed=2) for s in (three, one)]
    assert [r.run()[0] for r in runs] == ["converged", "converged"]
    repo.close()
    conn = sqlite3.connect(db)
    assert conn.execute("select count(*) from iterations where worker is not null").fetchone()[0] == 0
    assert conn.execute("select mode from jobs").fetchall() == [("sync",), ("sync",)]
    # A step of 3 workers trains a batch 3 times as large: fewer iterations to the target than 1 worker.
    assert runs[0].state.step < 0.6 * runs[1].state.step


def _window_spread(db: str, seconds: float) -> tuple[float, float]:
    """A fixed job's time per iteration over windows of ``seconds``: the windows' relative spread, and what their
    own iterations' noise explains of it (the median of gap deviation / mean / sqrt(n))."""
    walls = np.array([w for (w,) in sqlite3.connect(db).execute("select wall_time from iterations order by step")])
    means, own = [], []
    for start in np.arange(walls[0], walls[-1] - seconds, seconds):
        gaps = np.diff(walls[(walls >= start) & (walls < start + seconds)])
        means.append(gaps.mean())
        own.append(gaps.std() / gaps.mean() / np.sqrt(gaps.size))
    return float(np.std(means, ddof=1) / np.mean(means)), float(np.median(own))


@fast
def test_a_machine_that_drifts_makes_one_settings_stretches_differ_beyond_their_own_noise(tmp_path):
    """Workload.drift: a slowdown of mean 1, redrawn every drift_period_s; none by default."""
    spreads = {}
    for drift in (0.0, 0.1):
        db = str(tmp_path / f"drift-{drift}.db")
        repo = Repository(db)
        workload = small_workload(drift=drift, drift_period_s=2.0, target_loss=0.2)  # under the floor: 60 s
        Simulation(workload, repo, workload.default_setting(), tuning=None, seed=3, max_seconds=60).run()
        repo.close()
        spreads[drift] = _window_spread(db, 4.0)
    (steady, own), (drifting, _) = spreads[0.0], spreads[0.1]
    assert steady < 2 * own  # the iterations' own noise alone
    assert drifting > 10 * own  # two draws of 10% a window: about 0.07 (0.054 here)
    with pytest.raises(ConfigurationError, match=r"^a workload's drift must be >= 0 and its drift_period_s > 0, "
                                                 r"got drift=-0\.1, drift_period_s=2\.0$"):
        small_workload(drift=-0.1, drift_period_s=2.0)


def test_a_decision_the_job_ends_during_is_recorded_not_applied(tmp_path, monkeypatch):
    """The tuner's decisions take simulated time; a job that ends meanwhile (here max_seconds, during the
    first decision made to take an hour) records that decision all the same, a switch as not applied, as the
    driver does. The decisions' overhead in the repository was short of the manager's when the job ended so."""
    from dataclasses import replace

    from tfonline.tuner.manager import TuningManager

    made = []
    decide = TuningManager.on_segment_end

    def slow(self, run):
        made.append(replace(decide(self, run), overhead_s=3600.0))
        return made[-1]

    monkeypatch.setattr(TuningManager, "on_segment_end", slow)
    db = str(tmp_path / "runs.db")
    repo = Repository(db)
    workload = small_workload(curve=JOB_CURVE)
    sim = Simulation(workload, repo, workload.default_setting(), tuning=QUICK_TUNING, seed=1, max_seconds=60)
    status, reason = sim.run()
    repo.close()
    rows = sqlite3.connect(db).execute("select applied, reason from decisions where job_id = ?",
                                       (sim.job_id,)).fetchall()
    assert status == "stopped" and "max_seconds" in reason and len(made) == 1
    assert len(rows) == 1 and rows[0][0] == 0
    assert made[0].switch and rows[0][1] == "not applied, the job ended first: " + made[0].reason  # a random draw
