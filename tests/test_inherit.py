"""Learning across jobs (issue 19): what a job's tuner inherits from earlier jobs, chosen by workload signature."""

from __future__ import annotations

import dataclasses
import json
import math
import random

import numpy as np
import pytest
import simulated as sim
from scipy.stats import spearmanr

from tfonline.repository import Repository
from tfonline.setting import setting_key
from tfonline.signature import Signature
from tfonline.simulator import Simulation
from tfonline.tuner import Triple, Tuning, inherit, load_triples
from tfonline.tuner._gpyopt import GPOptimizer, Observation, _contained
from tfonline.tuner.convergence import SegmentSlope, slope_columns

# No test here starts a cluster (a simulated job, a repository written here); those that fit the GP many times or
# run simulated jobs (30 s together on a slow machine) are left out of the inner loop's `pytest -m fast`.
fast = pytest.mark.fast

LOGR = Signature(variables=2, parameter_bytes=16_388, largest_bytes=16_384, partitioned=False, sparse_reads=True,
                 ops=127, madds_per_example=0.0, batch_size=32, example_shapes=((8,), (8,)),
                 optimizer="AdagradOptimizer", mode="async")


def _settings(space, count, seed):
    rng = random.Random(seed)
    return [space.sample(rng) for _ in range(count)]


def _fit(space, observations, current, seed=0):
    optimizer = GPOptimizer(space, seed=seed)
    with _contained(seed, 0):
        return optimizer.fit(observations, 0.5, current)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_similar_jobs_observations_teach_the_gp_the_settings_this_job_has_not_tried(seed):
    """Another job (distance 0.3) 1.5x slower everywhere, measured on 12 settings; this job on 4. Its GP
    ranks 20 settings neither tried by this job's true times far better than with its own 4 alone, and
    predicts them at this job's level."""
    space = sim.space()
    tried = _settings(space, 16, seed)
    unseen = _settings(space, 20, seed + 100)
    truth = np.log([sim.seconds_per_iteration(s) for s in unseen])
    own = [Observation(s, 0.5, sim.seconds_per_iteration(s)) for s in tried[:4]]
    other = [Observation(s, 0.55, 1.5 * sim.seconds_per_iteration(s), distance=0.3, job="other") for s in tried[4:]]
    with_other = _fit(space, other + own, tried[0], seed).predict(unseen)[0]
    alone = _fit(space, own, tried[0], seed).predict(unseen)[0]
    assert spearmanr(with_other, truth)[0] > 0.9
    assert spearmanr(with_other, truth)[0] > spearmanr(alone, truth)[0] + 0.25
    # ... and its level is this job's, not the other job's 1.5x: within 10% on average at the unseen settings
    assert abs(np.mean(with_other - truth)) < math.log(1.1)


def _repository(tmp_path, jobs):
    """A repository holding ``jobs``: (id, name, signature or None, triples[, attributes]) each."""
    repo = Repository(tmp_path / "runs.db")
    for n, (job_id, name, signature, triples, *attributes) in enumerate(jobs):
        repo.insert("jobs", {"id": job_id, "name": name, "started_at": float(n), "status": "converged",
                             "signature": json.dumps(signature.to_dict()) if signature else None,
                             "attributes": json.dumps(attributes[0]) if attributes else None})
        for i, t in enumerate(triples):
            repo.insert("settings", {"id": setting_key(t.setting), "knobs": json.dumps(t.setting), "short": ""},
                        replace=True)
            repo.insert("triples", {"job_id": job_id, "segment": i, "setting_id": setting_key(t.setting),
                                    "loss_before": t.loss_before, "per_iteration_s": t.per_iteration_s,
                                    "remaining_iterations": 100.0, "remaining_s": t.per_iteration_s * 100,
                                    **slope_columns(t.slope)})
    repo.flush()
    return repo


def _triples(space, count, seed, scale=1.0):
    return [Triple(s, 0.6, scale * sim.seconds_per_iteration(s), 100.0, 1.0) for s in _settings(space, count, seed)]


@fast
def test_a_job_inherits_from_similar_workloads_whatever_their_names_and_nothing_from_others(tmp_path):
    space = sim.space()
    wider = dataclasses.replace(LOGR, parameter_bytes=LOGR.parameter_bytes * 2)  # distance ln 2 = 0.69
    huge = dataclasses.replace(LOGR, parameter_bytes=LOGR.parameter_bytes * 16)  # ln 16 = 2.77: too far
    other_optimizer = dataclasses.replace(LOGR, optimizer="AdamOptimizer")  # 1.0: the edge, kept
    repo = _repository(tmp_path, [
        ("sweep-lr-0.1", "LogR", LOGR, _triples(space, 4, 0)),
        ("wider", "WideLogR", wider, _triples(space, 3, 1)),
        ("huge", "HugeLogR", huge, _triples(space, 5, 2)),
        ("adam", "AdamLogR", other_optimizer, _triples(space, 2, 3)),
        ("unsigned", "Legacy", None, _triples(space, 2, 4)),
        ("me", "LogR", LOGR, _triples(space, 2, 5)),  # this job's own, from before a resume
    ])
    got = inherit(repo, "me", "LogR", LOGR, space)
    assert [(s.job_id, round(s.distance, 2), s.triples) for s in got.sources] == [
        ("sweep-lr-0.1", 0.0, 4), ("wider", 0.69, 3), ("adam", 1.0, 2)]  # nearest first
    assert [t.source for t in got.triples] == ["adam"] * 2 + ["wider"] * 3 + ["sweep-lr-0.1"] * 4 + [None] * 2
    weight = sim.make_manager(space, 0, history=got.triples).inherited_weight  # this job's own count whole
    assert weight == pytest.approx(2 * math.exp(-1) + 3 * 0.5 + 4 + 2, rel=1e-4)
    # A job unlike any of them inherits only its own; by name alone (no signature), its namesakes.
    assert inherit(repo, None, "Other", huge, space).sources[0].job_id == "huge"
    assert [s.job_id for s in inherit(repo, None, "Other", dataclasses.replace(huge, mode="sync", batch_size=256), space).sources
            ] == []
    assert [t.source for t in load_triples(repo, "Legacy", space)] == ["unsigned"] * 2
    repo.close()


def test_the_inherited_weight_shortens_or_skips_the_random_phase_and_the_budget_uses_only_this_jobs_times():
    space = sim.space()
    near = [dataclasses.replace(t, distance=0.0, source="a") for t in _triples(space, 4, 0)]
    far = [dataclasses.replace(t, distance=1.0, source="b", per_iteration_s=100.0) for t in _triples(space, 3, 1)]
    manager = sim.make_manager(space, 0, history=far + near)
    assert manager.inherited_weight == pytest.approx(4 + 3 * math.exp(-1))
    assert manager.random_settings == 10 - 5  # the paper's N = 10, less the weight's whole part
    assert manager.best_per_iteration_s() == pytest.approx(min(t.per_iteration_s for t in near))
    assert manager.time_share() == 0.0  # no R̂ of its own yet: another job's remaining time is not this one's
    decisions = sim.SimulatedJob(0).drive(manager, 8)
    assert [d.phase for d in decisions].count("random") <= 5
    skipped = sim.make_manager(space, 0, history=[dataclasses.replace(t, source="a") for t in _triples(space, 11, 2)])
    assert [d.phase for d in sim.SimulatedJob(0).drive(skipped, 3)] == ["online"] * 3


@fast
def test_with_inherited_observations_but_no_estimate_of_its_own_curve_the_job_stays():
    """The CNN sweep's second job hit this (benchmarks/sweep.py, smoke): its random phase skipped, the GP had
    observations, but the estimator could not yet fit the job's own curve; the tuner then raised."""
    from tfonline.tuner.manager import SegmentRun

    space = sim.space()
    manager = sim.make_manager(space, 0, history=[dataclasses.replace(t, source="a") for t in _triples(space, 11, 2)])
    steps = np.arange(1, 41)
    rising = SegmentRun(manager.current, steps, np.linspace(0.7, 0.9, 40), 0.01 * steps, 0.7, 0.9)  # no curve to fit
    decision = manager.on_segment_end(rising)
    assert decision.phase == "online" and not decision.switch
    assert decision.reason == "no estimate of this job's curve yet: stay"


@fast
def test_slopes_carry_over_from_every_job_inherited(tmp_path):
    """Times and how fast the loss fell carry over from every similar job: another learning rate's slopes
    get a level of their own in the convergence speeds (test_other_jobs_slopes_...)."""
    space = sim.space()
    sloped = [dataclasses.replace(t, slope=SegmentSlope(0.6, -1e-3, 1e-4)) for t in _triples(space, 2, 0)]
    repo = _repository(tmp_path, [
        ("before", "LogR", LOGR, sloped, {"lr": 0.1}),  # this job, run before
        ("other-lr", "LogR", LOGR, sloped, {"lr": 0.3}),  # the sweep's next learning rate
        ("renamed", "LogR2", LOGR, sloped, {"lr": 0.1}),  # another class, the same workload
        ("legacy", "LogR", LOGR, sloped),  # recorded before attributes were
    ])
    got = inherit(repo, None, "LogR", LOGR, space)
    assert {t.source for t in got.triples} == {"before", "other-lr", "renamed", "legacy"}
    assert all(t.slope == SegmentSlope(0.6, -1e-3, 1e-4) and t.per_iteration_s is not None for t in got.triples)
    repo.close()


@fast
def test_a_job_starts_from_the_nearest_earlier_jobs_latest_gp_fit(tmp_path):
    """The GP's hyperparameters carry over too: the nearest job's latest fit that was recorded (a fit costs
    0.6-2.4 s of CPU on a busy machine, 50-120 s of a job at the 2% overhead share); a job run before under
    its own id gives its own first."""
    space = sim.space()
    triples = _triples(space, 2, 0)
    repo = _repository(tmp_path, [("far", "LogR", None, triples), ("near", "LogR", LOGR, triples),
                                  ("unfitted", "LogR", LOGR, triples)])

    def fit(job_id, step, value):
        repo.insert("gp_fits", {"job_id": job_id, "step": step, "form": json.dumps(["a", "b"]),
                                "hyperparameters": json.dumps([value, 2.0]), "cost_s": 0.5})

    fit("far", 10, 9.0)
    fit("near", 10, 1.0)
    fit("near", 20, 3.0)
    repo.flush()
    got = inherit(repo, None, "LogR", LOGR, space)
    assert got.gp_fit_from == "near" and got.gp_fit.values == (3.0, 2.0) and got.gp_fit.form == ("a", "b")
    fit("mine", 5, 7.0)
    repo.insert("jobs", {"id": "mine", "name": "LogR", "started_at": 9.0, "status": "interrupted"})
    repo.flush()
    assert inherit(repo, "mine", "LogR", LOGR, space).gp_fit_from == "near"  # it has no triples of its own
    repo.close()


def test_a_tuner_given_an_earlier_jobs_fit_does_not_fit_the_gp_at_its_first_decision():
    """A decision that fits the GP hands its fit over (Decision.gp_fit, which the driver records); a tuner
    started from it conditions its GP on the observations with those hyperparameters, until its overhead
    share pays for a fit of its own."""
    space = sim.space()
    first = sim.make_manager(space, 0, 0.305, random_settings=3)
    decisions = sim.SimulatedJob(0, 0.305).drive(first, 5)
    fits = [d.gp_fit for d in decisions if d.gp_fit is not None]
    # no share: the 2 online decisions fit the GP, and the random ones that price their draws by its times fit
    # it when its observations have doubled (at 2, not at 3)
    assert len(fits) == 3 and all(f.cost_s > 0 for f in fits)
    assert [d.gp_fit is not None for d in decisions] == [False, True, False, True, True]
    assert (fits[-1].form, fits[-1].values) == first.optimizer.latest_fit
    second = sim.make_manager(space, 1, 0.305, history=[dataclasses.replace(t, source="first")
                                                        for t in first.triples], gp_fit=fits[-1],
                              overhead_share=0.02, random_settings=0)
    suggest, asked = second.optimizer.suggest, []

    def spy(*args, **kwargs):
        suggestion = suggest(*args, **kwargs)
        asked.append(suggestion.refitted)
        return suggestion

    second.optimizer.suggest = spy
    job = sim.SimulatedJob(1, 0.305)
    while not asked and second.decisions < 4:
        (decision,) = job.drive(second, 1)
    assert asked == [False] and decision.gp_fit is None  # the first decision that asked the GP did not fit it


@fast
def test_a_job_given_no_setting_starts_where_the_nearest_earlier_job_that_reached_its_target_ended(tmp_path):
    """A sweep's later job starts on the setting the nearest earlier job's tuner ended on (the best of its
    workers, below), not on TensorFlow's default (one CNN job at a high learning rate lost its network on the
    default's 3 asynchronous workers before its first decision): from a job that reached its target, on this
    space's nodes and pins."""
    space = sim.space()
    first, last = _settings(space, 2, 0)
    big = dict(first, ps=3, worker=3)
    assert not space.contains(big)  # 6 nodes; the space has 5
    repo = _repository(tmp_path, [("done", "LogR", LOGR, _triples(space, 2, 0)),
                                  ("capped", "LogR", LOGR, _triples(space, 2, 1)),
                                  ("far", "WideLogR", dataclasses.replace(LOGR, parameter_bytes=16_388 * 2),
                                   _triples(space, 2, 2))])

    def segments(job_id, *settings):
        for i, s in enumerate(settings):
            repo.insert("settings", {"id": setting_key(s), "knobs": json.dumps(s), "short": ""}, replace=True)
            repo.insert("segments", {"job_id": job_id, "segment": i, "setting_id": setting_key(s)})

    segments("done", first, last)
    segments("capped", last, first)
    segments("far", first, big)
    repo.update("jobs", "capped", {"status": "max_seconds"})
    repo.flush()
    got = inherit(repo, None, "LogR", LOGR, space)
    assert [s.job_id for s in got.sources] == ["capped", "done", "far"]  # nearest, then latest, first
    assert got.start == last and got.start_from == "done"  # the capped job did not reach its target
    pinned = sim.space(worker=1 if last["worker"] != 1 else 2)
    assert inherit(repo, None, "LogR", LOGR, pinned).start is None  # outside the user's pins
    repo.update("jobs", "done", {"status": "failed"})
    repo.update("jobs", "far", {"status": "converged"})
    repo.flush()
    assert inherit(repo, None, "LogR", LOGR, space).start is None  # the far job ended on 6 nodes
    repo.close()


@fast
def test_the_start_is_the_fastest_measured_setting_of_the_workers_the_earlier_job_ended_on(tmp_path):
    """An earlier job ended on a slow setting after exploring late: the next job starts on the setting of the
    same workers that it measured fastest per iteration (median of its segments), not on the last, and not on
    a faster one of other workers, whose iterations to the target may differ."""
    space = sim.space()
    rng = random.Random(3)
    last = space.sample(rng)
    quick, slow = dict(last), dict(last)
    quick["intra_op_parallelism_threads"] = next(v for v in space.values["intra_op_parallelism_threads"]
                                                 if v != last["intra_op_parallelism_threads"])
    slow["global_jit_level"] = next(v for v in space.values["global_jit_level"] if v != last["global_jit_level"])
    others = next(s for s in iter(lambda: space.sample(rng), None) if s["worker"] != last["worker"])
    assert all(space.contains(s) for s in (quick, slow, others)) and len({setting_key(s) for s in
                                                                        (last, quick, slow, others)}) == 4
    measured = [(quick, 0.0010), (quick, 0.0030), (quick, 0.0012), (slow, 0.0020), (others, 0.0005),
                (last, 0.0030)]  # quick's median 1.2 ms; the mean (1.73 ms) would pick slow
    triples = [Triple(s, 0.6, t, 100.0, 1.0) for s, t in measured]
    for name, kept in (("measured", triples), ("unmeasured", triples[:-1])):  # the last setting never measured
        (tmp_path / name).mkdir()
        repo = _repository(tmp_path / name, [("done", "LogR", LOGR, kept)])
        for i, (s, _) in enumerate(measured):
            repo.insert("settings", {"id": setting_key(s), "knobs": json.dumps(s), "short": ""}, replace=True)
            repo.insert("segments", {"job_id": "done", "segment": i, "setting_id": setting_key(s)})
        repo.flush()
        got = inherit(repo, None, "LogR", LOGR, space)
        assert got.start == (quick if name == "measured" else last) and got.start_from == "done"
        repo.close()


@pytest.mark.parametrize("seed", [0, 1])
def test_a_job_run_again_on_its_repository_is_never_slower_than_its_fresh_run(tmp_path, seed):
    """Issue 17: the second run of a job on the same repository (resuming, the default) against a fresh run,
    the first, on the same seed: from a slow start (XLA at its dearest level), with the product's tuning
    (10 random settings, the exploration budget). The second starts on the first's best setting and inherits
    its observations and GP fit: it must not pay again for what the first learned. Seeds 0-5 (2026-11-25):
    0.76-0.87x the first; with the start alone (resume=False) 0.80-0.88x, with the observations alone (from
    the slow start) 0.89-0.93x, with neither 0.98-1.05x (the GP's own time passes on the simulated clock)."""
    workload = sim.small_workload(curve=sim.LONG)
    start = dict(workload.default_setting(), global_jit_level="ON_2")
    tuning = Tuning(initial_iterations=20, segment_iterations=60, min_segment_s=0)  # resume: the default
    repo = Repository(tmp_path / "runs.db")
    times, starts = [], []
    for run in range(2):
        starts.append(inherit(repo, None, workload.name, None, workload.space()).start or start)
        job = Simulation(workload, repo, starts[-1], tuning=tuning, seed=seed)
        assert job.run()[0] == "converged"
        times.append(job.clock.now - job.started_at)
    repo.close()
    assert starts[0] == start and starts[1] != start  # the first's best setting, not its slow start
    assert times[1] <= 0.95 * times[0]
