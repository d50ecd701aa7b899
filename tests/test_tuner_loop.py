"""The tuning loop against a simulated backend with a known response surface, and the GPyOpt wrapper."""

from __future__ import annotations

import itertools
import math
import random
import re
import time
import warnings
from dataclasses import replace

import numpy as np
import pytest
import simulated as sim

from tfonline.estimator import get_estimator
from tfonline.exceptions import ConfigurationError
from tfonline.repository import Repository
from tfonline.setting import setting_key
from tfonline.tuner import Triple, load_triples
from tfonline.tuner import _gpyopt
from tfonline.tuner._gpyopt import GPOptimizer, Observation, _contained
from tfonline.timing import TIMING_PRECISION, Timing, gap_spread, iterations_to_time, per_iteration_time
from tfonline.tuner.convergence import MIN_SPREAD, PRIOR_SD, SegmentSlope, Speeds, slope_columns
from tfonline.tuner.budget import FIRST_FIT_S
from tfonline.tuner.recheck import SURPRISE
from tfonline.tuner.history import loss_trend
from tfonline.tuner.improvement import LARGEST_LOG, against
from tfonline.tuner.manager import CostModel, TuningManager
from tfonline.setting import Knob
from tfonline.reconfig import switch_parts
from tfonline.tuner.space import KnobSpace

DECISIONS = 40


def test_the_loop_finds_a_setting_within_10_percent_of_the_optimum():
    """Five free knobs (ps, worker, two thread pools, XLA); the start is about 8x slower than the optimum.

    On each of four seeds, within 30 decisions (10 random, 20 online) the job runs a setting within 10% of
    the optimum; over the four, it spends at least two thirds of the online decisions after that within 10%
    too (a GP fitted to noisy segments may still try a worse setting now and then).

    One seed's share is chaotic in the floating point: on one machine seed 0 gave 25 of 30, on another 13
    or 14 (single- or multi-threaded BLAS), while seeds 0-7 gave 80-81% there, 88% on the first; four seeds'
    shares ranged 71-89% (NOTES.md, thirty-third session). 10 s a seed on 2 cores.
    """
    within, after_all = 0, 0
    for seed in range(4):
        start, manager, decisions, ratios = sim.known_surface_loop(seed, DECISIONS)
        print(f"seed {seed}: start {start:.2f}x the optimum; after each decision: "
              + " ".join(f"{r:.2f}" for r in ratios))
        assert start > 5
        found = next(i for i, r in enumerate(ratios) if r <= 1.10)
        assert found < 30
        after = ratios[max(found, 10):]
        within, after_all = within + sum(r <= 1.10 for r in after), after_all + len(after)
        assert [d.phase for d in decisions[:10]] == ["random"] * 10 and decisions[10].phase == "online"
        assert all(d.switch for d in decisions[:10])
        assert manager.overhead_s > 0 and all(d.overhead_s >= 0 for d in decisions)
    assert within >= 2 / 3 * after_all, (within, after_all)


@pytest.mark.parametrize("level, expected", [("ON_2", "s*"), ("ON_1", "s* with XLA held off")])
def test_a_compile_level_no_setting_has_run_is_not_exploited(level, expected):
    """Both GP candidates pay against the current setting, s* (with XLA at ``level``) by more; s* is exploited
    only when some observed setting had that XLA level (the start here has ON_2, none has ON_1)."""
    space = sim.space()
    rng = random.Random(2)
    history = [Triple(dict(s, global_jit_level="OFF"), 0.6, 0.01, 100.0, 1.0)
               for s in (space.sample(rng) for _ in range(6))]
    manager = sim.make_manager(space, 0, 0.305, random_settings=0, history=history)
    assert manager.current["global_jit_level"] == "ON_2"
    target = dict(history[0].setting, ps=1, worker=3)

    def suggest(observations, loss, current, **kwargs):
        top = dict(target, global_jit_level=level)
        held = dict(target, global_jit_level="OFF")
        candidates = [_gpyopt.Candidate(top, 600.0, _gpyopt.Prediction(top, 100.0, 700.0, 1.0)),
                      _gpyopt.Candidate(held, 500.0, _gpyopt.Prediction(held, 150.0, 650.0, 1.0))]
        return _gpyopt.Suggestion(candidates, 800.0, None)

    manager.optimizer.suggest = suggest  # the GP's answer, fixed: what the loop does with it is tested
    (decision,) = sim.SimulatedJob(0, 0.305).drive(manager, 1)
    assert decision.switch and decision.reason.startswith(f"exploit {expected}:"), decision.reason
    assert decision.candidate["global_jit_level"] == (level if expected == "s*" else "OFF")


@pytest.mark.parametrize("spent_s, explores", [(0.0, True), (10.0, False)])
def test_exploring_is_priced_at_the_segment_the_overhead_share_holds_it_to(spent_s, explores):
    """s* is predicted 20% slower and 60% likely worse; its EI, 30 s, pays for a segment of the usual length and
    the switch (an XLA compile, 10 s). When
    the tuner's time so far (``spent_s`` of CPU) holds the next segment to hundreds of seconds under its 2% share,
    exploring costs that long a segment on s*, and the job stays (a tuned CNN job explored a setting predicted
    19 s slower right after a GP fit of 3.6 s, and ran it 170 s)."""
    space = sim.space()
    rng = random.Random(2)
    history = [Triple(dict(space.sample(rng), ps=2, worker=1), 0.6, 0.01, 100.0, 1.0) for _ in range(6)]
    manager = sim.make_manager(space, 0, 0.305, random_settings=0, history=history, overhead_share=0.02,
                               exploration_budget=None)
    target = dict(manager.current, intra_op_parallelism_threads=max(space.values["intra_op_parallelism_threads"]))

    def suggest(observations, loss, current, **kwargs):
        prediction = _gpyopt.Prediction(target, 120.0, -20.0, 0.4)
        return _gpyopt.Suggestion([_gpyopt.Candidate(target, 30.0, prediction)], 100.0, None)

    manager.optimizer.suggest = suggest  # the GP's answer, fixed: what the loop does with it is tested
    manager.overhead.decided(spent_s, False)
    (decision,) = sim.SimulatedJob(0, 0.305).drive(manager, 1)
    assert decision.switch == explores, decision.reason
    assert decision.reason.startswith("explore s*:" if explores else "EI 30 s does not exceed the price of exploring")


@pytest.mark.parametrize("faster, returns", [(1.0, False), (0.7, True)])
def test_going_back_to_a_setting_left_recently_needs_its_segments_faster_beyond_their_noise(faster, returns):
    """The job leaves setting A for B on the GP's word, then the GP calls A better, 100% sure. A tuned CNN job
    went back and forth five times so, between settings its segments timed alike. Back to A needs A's segments
    ``faster`` than B's beyond their scatter: alike, the job stays on B; 30% faster, it goes back."""
    space = sim.space()
    probe = sim.make_manager(space, 0)
    a = dict(probe.current)
    b = dict(a, inter_op_parallelism_threads=max(space.values["inter_op_parallelism_threads"]))
    t_b = sim.seconds_per_iteration(b)
    history = ([Triple(a, 0.6, t_b * faster * f, 100.0, 1.0) for f in (1.0, 1.02, 0.98)]
               + [Triple(b, 0.6, t_b * f, 100.0, 1.0) for f in (1.01, 0.99)])
    manager = sim.make_manager(space, 0, 0.305, random_settings=0, history=history, exploration_budget=None)
    answers = iter([(b, a), (a, b)])  # (the setting predicted 50 s sooner, the current one)

    def suggest(observations, loss, current, **kwargs):
        better, here = next(answers)
        assert current == here
        prediction = _gpyopt.Prediction(better, 50.0, 50.0, 1.0)
        return _gpyopt.Suggestion([_gpyopt.Candidate(here, 0.0, _gpyopt.Prediction(here, 100.0, 0.0, 0.5))],
                                  100.0, prediction)

    manager.optimizer.suggest = suggest  # the GP's answers, fixed: what the loop does with them is tested
    left, back = sim.SimulatedJob(0, 0.305).drive(manager, 2)
    assert left.switch and left.candidate == b, left.reason
    assert back.switch == returns and (back.candidate == a) == returns, back.reason
    if returns:
        assert back.reason.startswith("exploit the best setting seen (back to a setting left recently)")


def test_a_stay_that_waits_for_a_setting_left_recently_keeps_the_segments_length():
    """The job leaves A for B on the GP's word; then the GP's s* is A again, by EI, but A was left recently
    and its segments are not faster than B's beyond their noise: the job stays on B, waiting for the block to
    end, and its segments keep their length; a settled stay (s* is the current setting) doubles it. A LogR
    benchmark job stretched a setting it explored so, to a fifth of the job."""
    space = sim.space()
    a = dict(sim.make_manager(space, 0).current)
    b = dict(a, inter_op_parallelism_threads=max(space.values["inter_op_parallelism_threads"]))
    t_b = sim.seconds_per_iteration(b)
    history = ([Triple(a, 0.6, t_b * f, 100.0, 1.0) for f in (1.0, 1.02, 0.98)]
               + [Triple(b, 0.6, t_b * f, 100.0, 1.0) for f in (1.01, 0.99)])
    manager = sim.make_manager(space, 0, 0.305, random_settings=0, history=history, exploration_budget=None)
    answers = iter([b, a, a, b, b])  # s*: B, then A (left recently) twice, then B, the current one

    def suggest(observations, loss, current, **kwargs):
        best = next(answers)
        prediction = _gpyopt.Prediction(best, 50.0, 50.0 if best != current else 0.0, 1.0 if best != current else 0.5)
        return _gpyopt.Suggestion([_gpyopt.Candidate(best, 30.0 if best != current else 0.0, prediction)], 100.0, None)

    manager.optimizer.suggest = suggest  # the GP's answers, fixed: what the loop does with them is tested
    job, stretches, made = sim.SimulatedJob(0, 0.305), [], []
    for _ in range(5):
        made += job.drive(manager, 1)
        stretches.append(manager.lengths.stretch)
    assert made[0].switch and made[0].candidate == b, made[0].reason
    assert [d.switch for d in made[1:]] == [False] * 4
    assert all(d.reason == "the best setting by EI was left recently" for d in made[1:3]), made[1].reason
    assert stretches == [1, 1, 1, 2, 4]


@pytest.mark.parametrize("measured", [False, True])
def test_the_first_segment_of_a_chosen_setting_no_segment_has_timed_is_not_stretched_for_the_share(measured):
    """The tuner is 10 s of CPU over its 5% share when it exploits s*. If no segment of the job has timed s*, its
    segment runs its usual length (0 s here), and the next decision leaves it (it runs 8x slower than the best
    seen); the segment after that one pays the share. A setting timed before is stretched at once."""
    space = sim.space()
    rng = random.Random(2)
    history = [Triple(dict(space.sample(rng), ps=2, worker=1), 0.6, 0.01, 100.0, 1.0) for _ in range(6)]
    manager = sim.make_manager(space, 0, 0.305, random_settings=0, history=history, overhead_share=0.05)
    target = history[0].setting if measured else dict(history[0].setting, ps=1)
    answers = iter([target, target])

    def suggest(observations, loss, current, **kwargs):
        better = next(answers)
        return _gpyopt.Suggestion([_gpyopt.Candidate(better, 50.0, _gpyopt.Prediction(better, 50.0, 50.0, 1.0))],
                                  100.0, None)

    manager.optimizer.suggest = suggest  # the GP's answers, fixed: what the loop does with them is tested
    manager.overhead.decided(10.0, False)
    job = sim.SimulatedJob(0, 0.305)
    (exploit,) = job.drive(manager, 1)
    assert exploit.switch and exploit.candidate == target, exploit.reason
    owed = manager.overhead_s / 0.05 - manager.elapsed_s
    assert owed > 100 and manager.segment_seconds() == pytest.approx(owed if measured else 0.0)
    (after,) = job.drive(manager, 1)
    assert measured or after.reason.startswith("leave a setting run for the first time"), after.reason
    assert manager.segment_seconds() == pytest.approx(manager.overhead_s / 0.05 - manager.elapsed_s)


def test_the_gate_blocks_a_switch_that_costs_more_than_it_gains():
    space = sim.space()
    manager = sim.make_manager(space, 0, cost_model=CostModel({"I-a": 1e6, "I-b": 1e6, "II": 1e6, "compile": 1e6}),
                               exploration_budget=None)
    job = sim.SimulatedJob(0)
    job.switch_cost_s = 1e6
    decisions = job.drive(manager, 16)
    online = [d for d in decisions if d.phase == "online"]
    assert online and not any(d.switch for d in online)
    blocked = [d for d in online if d.cost_s and d.cost_s > 0]
    assert blocked and all(d.expected_improvement_s < d.cost_s for d in blocked)
    assert all("does not exceed the price of exploring" in d.reason for d in blocked)


def test_a_manager_resumes_from_the_repository(tmp_path):
    """Triples written by one run seed the next: no random phase, and the same suggestion as the first manager."""
    space = sim.space()
    first = sim.make_manager(space, 3)
    sim.SimulatedJob(3).drive(first, 14)
    repo = Repository(tmp_path / "r.db")
    repo.insert("jobs", {"id": "j1", "name": "Sim", "started_at": 1.0, "status": "converged"})
    import json

    from tfonline.setting import setting_key

    for i, t in enumerate(first.triples):
        repo.insert("settings", {"id": setting_key(t.setting), "knobs": json.dumps(t.setting), "short": ""},
                    replace=True)
        repo.insert("triples", {"job_id": "j1", "segment": i, "setting_id": setting_key(t.setting),
                                "loss_before": t.loss_before, "per_iteration_s": t.per_iteration_s,
                                "remaining_iterations": t.remaining_iterations, "remaining_s": t.remaining_s,
                                **slope_columns(t.slope)})
    repo.flush()
    history = load_triples(repo, "Sim", space)
    assert len(history) == sum(t.usable for t in first.triples) and all(isinstance(t, Triple) for t in history)
    assert [t.setting for t in history] == [t.setting for t in first.triples if t.usable]
    # ... with each segment's slope, so the resumed job knows the settings' convergence speeds
    assert [t.slope for t in history] == [t.slope for t in first.triples if t.usable]
    assert sum(t.slope is not None for t in history) >= len(history) - 2
    resumed = sim.make_manager(space, 3, history=history)
    decisions = sim.SimulatedJob(4).drive(resumed, 3)
    assert [d.phase for d in decisions] == ["online"] * 3  # straight to the online phase
    assert load_triples(repo, "Other", space) == []
    repo.close()


def test_the_gp_is_seeded_and_contains_gpyopts_side_effects():
    space = sim.space()
    rng = random.Random(0)
    observations = []
    for i in range(8):
        s = space.sample(rng)
        observations.append(Observation(s, 0.6 - 0.01 * i, 10 * sim.time_per_progress(s) / 0.01))
    filters = list(warnings.filters)
    state = np.random.get_state()[1].copy()
    first = GPOptimizer(space, seed=5).suggest(observations, 0.5, observations[0].setting)
    second = GPOptimizer(space, seed=5).suggest(observations, 0.5, observations[0].setting)
    assert first == second and space.contains(first.setting)
    assert first.expected_improvement_s >= 0 and first.current_s > 0
    current = observations[0].setting
    held = GPOptimizer(space, seed=5).suggest(observations, 0.5, current, hold=["global_jit_level"])
    assert len(held.candidates) == 2 and held.candidates[1].setting["global_jit_level"] == current["global_jit_level"]
    assert all(c.expected_improvement_s >= 0 and 0 <= c.prediction.confidence <= 1 for c in held.candidates)
    assert warnings.filters == filters  # GPyOpt's import-time "ignore everything" did not leak
    assert np.array_equal(np.random.get_state()[1], state)  # nor did its use of NumPy's global generator


def _observations(space, count, seed=0):
    rng = random.Random(seed)
    return [Observation(s, 0.6 - 0.01 * i, 10 * sim.time_per_progress(s) / 0.01 * (1 + s.get("tag", 0)))
            for i, s in enumerate(space.sample(rng) for _ in range(count))]


def test_ei_is_maximised_over_every_setting_of_a_small_space():
    """The maximiser's choice is the best of every setting by EI over the current setting (its scores)."""
    tag = Knob("tag", "nominal", "II", "session ConfigProto", choices=(0, 1, 2), apply=lambda config, value: None)
    space = KnobSpace(sim.NODES, sim.CORES, dict(sim.PINNED, tag=[0, 2]), extra_knobs=[tag])  # a one-hot of 2
    optimizer = GPOptimizer(space, seed=3)
    observations = _observations(space, 10)
    with _contained(3, 0):
        model = optimizer.fit(observations, 0.5, observations[0].setting)
        chosen = model.maximise({})
        held = model.maximise({"global_jit_level": space.encode_value("global_jit_level", "ON_1")})
        both = model.maximise_each([{}, {"global_jit_level": space.encode_value("global_jit_level", "ON_1")}])
        every = [dict(zip(space.free, values)) for values in itertools.product(*(space.values[n] for n in space.free))]
        every = [dict(space.decode(space.encode(dict(space.defaults, **s))), **s) for s in every]
        every = [s for s in every if space.contains(s)]
        scores = model.scores(np.array([space.encode(s) for s in every]))
        best = every[int(np.argmin(scores))]
        at_jit = [i for i, s in enumerate(every) if s["global_jit_level"] == "ON_1"]
        best_held = every[at_jit[int(np.argmin(scores[at_jit]))]]
    assert chosen == best and held == best_held and held["global_jit_level"] == "ON_1"
    assert both == [chosen, held]  # scored once, the held knob's choice read from the rows that hold it
    assert len(every) > 100 and scores.min() < np.median(scores)  # a choice that matters


@pytest.mark.fast
def test_a_mean_log_time_beyond_exps_range_reads_as_a_slow_setting_not_an_error():
    """A GP read far from its data once gave a mean log R̂ past 709.8, and math.exp's overflow failed the tuner
    of a simulated CNN run: such a setting is as slow as seconds go, and a switch to it gains nothing."""
    far = against({"worker": 1}, 800.0, math.log(100.0), 0.04)
    assert far.remaining_s == math.exp(LARGEST_LOG) and far.gain_s < 0 and far.confidence < 1e-9
    back = against({"worker": 2}, math.log(100.0), 800.0, 0.04)
    assert back.gain_s == pytest.approx(math.exp(LARGEST_LOG) - 100.0) and back.confidence > 1 - 1e-9
    assert against({"worker": 3}, 900.0, 800.0, 0.04).gain_s == 0.0  # both past the range: no gain either way


@pytest.mark.parametrize("seed", range(4))
def test_ei_counts_only_the_gain_beyond_one_segments_noise(seed):
    """EI taken beyond a margin (one segment's noise, 0.15 in log time) keeps most of itself where the
    settings' times differ by several times that, and loses much more of itself where they are one time
    scattered by that noise: a gain a segment cannot tell from noise is not worth a switch to learn it."""
    space = KnobSpace(sim.NODES, sim.CORES, sim.PINNED)
    rng = random.Random(seed)
    settings = [space.sample(rng) for _ in range(12)]
    noise = [math.exp(rng.gauss(0, 0.15)) for _ in settings]
    flat = [Observation(s, 0.6 - 0.01 * i, 0.05 * n) for i, (s, n) in enumerate(zip(settings, noise))]
    apart = [Observation(s, 0.6 - 0.01 * i, 10 * sim.time_per_progress(s) / 0.01 * n)
             for i, (s, n) in enumerate(zip(settings, noise))]
    kept = {}
    for name, observations in (("flat", flat), ("apart", apart)):
        ei = [GPOptimizer(space, seed=seed).suggest(observations, 0.5, settings[0], iterations_left=1000,
                                                     margin=margin).expected_improvement_s for margin in (0.0, 0.15)]
        assert ei[0] > 0 and 0 <= ei[1] < ei[0]
        kept[name] = ei[1] / ei[0]
    assert kept["apart"] > 0.9 and kept["flat"] < kept["apart"] - 0.25, kept


def test_a_random_draw_prefers_settings_predicted_to_lose_less_of_their_segment():
    """With the GP's predicted waste (the share of its segment a setting loses against the best seen), the
    random phase draws settings predicted fast (here one intra-op pool of 4) far more often than without (13 of
    30 draws: the pools new to the tried setting are 1, 2 and 3)."""
    from tfonline.tuner.explore import draw

    space = sim.space()
    start = space.start(space.defaults)

    def waste(settings):
        return [0.0 if s["intra_op_parallelism_threads"] == 1 else 0.9 for s in settings]

    chosen = {}
    for priced in (None, waste):
        rng = random.Random(7)
        chosen[priced] = [draw(space, rng, CostModel(), start, [start], None, 100.0, 10.0, waste=priced)[0]
                          for _ in range(30)]
    fast = {priced: sum(s["intra_op_parallelism_threads"] == 1 for s in settings) for priced, settings in chosen.items()}
    assert fast[waste] >= 25 and fast[None] <= 15, fast


def test_a_timed_random_segment_is_priced_by_its_iterations_and_a_fixed_one_by_its_seconds():
    """A segment of fixed seconds loses 1 - best/t of them; one of fixed iterations (timed: segment_s is their time
    at the best pace) t/best - 1 times that."""
    from types import SimpleNamespace

    from tfonline.tuner.explore import segment_waste

    fitted = SimpleNamespace(seconds=lambda settings: [s["t"] for s in settings])
    settings = [{"t": 1.0}, {"t": 2.0}, {"t": 4.0}, {"t": 0.0}]  # the best pace, 2x and 4x slower, no prediction
    assert segment_waste(fitted, 1.0)(settings) == [0.0, 0.5, 0.75, 1.0]
    assert segment_waste(fitted, 1.0, timed=True)(settings) == [0.0, 1.0, 3.0, 1.0]


def test_with_a_nominal_knob_the_gp_still_reads_the_loss():
    """A nominal knob's one-hot columns come before the loss's: the GP's loss kernels act on the loss column
    (they once took the last one-hot column for it, and a prediction did not move with the loss)."""
    tag = Knob("tag", "nominal", "II", "session ConfigProto", choices=(0, 1, 2), apply=lambda config, value: None)
    space = KnobSpace(sim.NODES, sim.CORES, dict(sim.PINNED, tag=[0, 2]), extra_knobs=[tag])
    rng = random.Random(4)
    losses = np.linspace(0.2, 0.9, 16)
    observations = [Observation(s, loss, sim.seconds_per_iteration(s) * (1 + 2 * loss))
                    for s, loss in zip((space.sample(rng) for _ in losses), losses)]
    setting = observations[5].setting
    with _contained(4, 0):
        early = GPOptimizer(space, seed=4).fit(observations, 0.85, setting).predict([setting])[0][0]
        late = GPOptimizer(space, seed=4).fit(observations, 0.25, setting).predict([setting])[0][0]
    assert early - late > math.log(1.5)  # the truth: log(2.7 / 1.5) = 0.59


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_gp_ranks_the_untried_layouts_of_a_large_cluster(seed):
    """On the paper's 36 nodes of 8 cores (the simulator's speed model), a GP fitted to 20 timed settings ranks
    40 untried ones by their true time per iteration. The node counts and thread pools are encoded in logs
    (the times go with ratios such as w/p); encoded as counts, the rank correlation was 0.87, 0.80 and 0.33."""
    from scipy.stats import spearmanr

    from tfonline.simulator.run import paper_scale

    workload = paper_scale("async")
    space = workload.space()
    rng = random.Random(seed)
    seen, untried = [space.sample(rng) for _ in range(20)], [space.sample(rng) for _ in range(40)]
    observations = [Observation(s, 0.5, workload.speed.iteration_s(s) * (1 + 0.05 * rng.gauss(0, 1))) for s in seen]
    with _contained(seed, 0):
        predicted = GPOptimizer(space, seed=seed).fit(observations, 0.5, seen[-1]).predict(untried)[0]
    assert spearmanr(predicted, [workload.speed.iteration_s(s) for s in untried])[0] > 0.9


def test_a_fit_without_refit_takes_the_latest_fits_hyperparameters_and_conditions_on_new_observations():
    space = sim.space()
    optimizer = GPOptimizer(space, seed=5)
    observations = _observations(space, 12, seed=2)
    with _contained(5, 0):
        first = optimizer.fit(observations[:10], 0.5, observations[0].setting)
        reused = optimizer.fit(observations, 0.5, observations[0].setting, refit=False)
        refitted = GPOptimizer(space, seed=5).fit(observations, 0.5, observations[0].setting)
    hyper = first.bo.model.model.param_array
    assert first.refitted and not reused.refitted and refitted.refitted
    assert np.array_equal(reused.bo.model.model.param_array, hyper)
    assert not np.allclose(refitted.bo.model.model.param_array, hyper)  # a fit of 12 would have moved them
    # conditioned on all 12: the two new observations' settings are predicted near what they measured
    new = observations[10:]
    predicted = np.exp(reused.predict([o.setting for o in new])[0] - reused.offset)
    before = np.exp(first.predict([o.setting for o in new])[0] - first.offset)
    measured = np.array([o.per_iteration_s for o in new])
    assert np.all(np.abs(np.log(predicted / measured)) < np.abs(np.log(before / measured)))
    # another kernel form (an inherited job's column) is fitted whatever refit says
    inherited = observations[:6] + [Observation(o.setting, o.loss, o.per_iteration_s, 0.5, "other")
                                    for o in observations[6:]]
    with _contained(5, 1):
        assert optimizer.fit(inherited, 0.5, observations[0].setting, refit=False).refitted


def test_a_refit_starts_from_the_latest_fit_until_the_observations_have_grown_half_again():
    """Once a fit from GPy's start and a random one (cold) has seen WARM_FROM observations, a refit runs L-BFGS
    once, from the latest fit's hyperparameters (warm): it ends at least as likely as that fit taken as it is,
    in fewer evaluations than a cold fit. Under WARM_FROM, and once the observations have grown WARM_GROWTH
    times since the latest cold fit, a refit is cold."""
    space = sim.space()
    optimizer = GPOptimizer(space, seed=5)
    observations = _observations(space, 45, seed=2)
    young, cold_at = _gpyopt.WARM_FROM - 10, _gpyopt.WARM_FROM

    def fit(optimizer, n, **kwargs):
        return optimizer.fit(observations[:n], 0.5, observations[0].setting, **kwargs)

    def runs(fitted):
        return fitted.bo.model.model.optimization_runs

    with _contained(5, 0):
        assert len(runs(fit(optimizer, young))) == len(runs(fit(optimizer, young + 1))) == _gpyopt.GP_FIT_RESTARTS
        first = fit(optimizer, cold_at)
        reused = GPOptimizer(space, seed=5)
        reused.adopt(*optimizer.latest_fit)
        taken = fit(reused, cold_at + 5, refit=False)
        warm = fit(optimizer, cold_at + 5)
        cold = fit(GPOptimizer(space, seed=5), cold_at + 5)
    assert len(runs(first)) == _gpyopt.GP_FIT_RESTARTS == len(runs(cold)) and len(runs(warm)) == 1
    assert warm.refitted and not taken.refitted
    likelihood = [float(f.bo.model.model.log_likelihood()) for f in (taken, warm)]
    assert likelihood[1] >= likelihood[0] - 1e-9
    assert runs(warm)[0].funct_eval < sum(run.funct_eval for run in runs(cold))
    assert optimizer.latest_fit[1] == tuple(warm.bo.model.model.param_array)
    with _contained(5, 1):  # 45 = 1.5 x 30: cold again
        again = fit(optimizer, int(_gpyopt.WARM_GROWTH * cold_at))
    assert len(runs(again)) == _gpyopt.GP_FIT_RESTARTS


def test_a_fit_blind_to_the_setting_is_refitted_once_more_observations_have_come(monkeypatch):
    """A fit that gives the setting no variance (a tuned CNN job's one fit put it all on the loss) predicts every
    setting alike; it is reused while no observation has come since, and refitted, whatever ``refit`` says,
    once one has."""
    space = sim.space()
    optimizer = GPOptimizer(space, seed=5)
    observations = _observations(space, 12, seed=2)
    with _contained(5, 0):
        assert optimizer.fit(observations[:10], 0.5, observations[0].setting).refitted
    assert not optimizer.blind
    form, values = optimizer.latest_fit
    # The same hyperparameters with no variance on the setting, alone or with the loss: blind.
    zeroed = [0.0 if name.split(".")[-2:] in (["setting", "variance"], ["setting_by_loss", "variance"]) else v
              for name, v in zip(form, values)]
    assert zeroed != list(values)
    optimizer.adopt(form, zeroed)
    assert optimizer.blind
    with _contained(5, 1):  # another job's blind fit saw none of these observations
        assert optimizer.fit(observations[:10], 0.5, observations[0].setting, refit=False).refitted
    assert not optimizer.blind  # a fit of these observations sees the setting
    # Its own blind fit (every fit counts as blind here): reused on the observations it saw, not on more.
    monkeypatch.setattr(_gpyopt, "BLIND", math.inf)
    with _contained(5, 2):
        assert optimizer.fit(observations[:10], 0.5, observations[0].setting).refitted and optimizer.blind
        assert not optimizer.fit(observations[:10], 0.5, observations[0].setting, refit=False).refitted
        assert optimizer.fit(observations[:11], 0.5, observations[0].setting, refit=False).refitted
        assert not optimizer.fit(observations[:11], 0.5, observations[0].setting, refit=False).refitted


def test_a_fit_that_cannot_take_the_latest_hyperparameters_is_refitted(monkeypatch):
    """Seen in the sweep benchmark: the latest fit's hyperparameters on today's observations gave a covariance
    that is not positive definite (GPy: "not positive definite, even with jitter"). The fit is made afresh."""
    from GPy.inference.latent_function_inference import exact_gaussian_inference as exact

    space = sim.space()
    optimizer = GPOptimizer(space, seed=6)
    observations = _observations(space, 10, seed=3)
    with _contained(6, 0):
        optimizer.fit(observations[:8], 0.5, observations[0].setting)
    pdinv, calls = exact.pdinv, []

    def fails_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # while the GP is made with, or given, the latest hyperparameters
            raise np.linalg.LinAlgError("not positive definite, even with jitter.")
        return pdinv(*args, **kwargs)

    monkeypatch.setattr(exact, "pdinv", fails_once)
    with _contained(6, 1):
        model = optimizer.fit(observations, 0.5, observations[0].setting, refit=False)
    assert len(calls) > 2 and model.refitted
    assert np.all(np.isfinite(model.predict([o.setting for o in observations[:3]])[0]))


def test_in_a_large_space_ei_is_maximised_by_a_climb_to_a_local_optimum(monkeypatch):
    monkeypatch.setattr(_gpyopt, "ENUMERATE_AT_MOST", 300)  # of the 4 x 4 x 4 x 4 x 3 settings, 300 sampled
    space = sim.space()
    optimizer = GPOptimizer(space, seed=4)
    with _contained(4, 0):
        observations = _observations(space, 12, seed=1)
        model = optimizer.fit(observations, 0.5, observations[0].setting)
        chosen = model.maximise({})
        x = np.array(space.encode(chosen))
        score = model.scores(x[None, :])[0]
        neighbours = [dict(chosen, **{name: v}) for name in space.free for v in space.values[name] if v != chosen[name]]
        neighbours = [s for s in neighbours if space.contains(s)]
        around = model.scores(np.array([space.encode(s) for s in neighbours]))
        rng = random.Random(9)
        others = model.scores(np.array([space.encode(space.sample(rng)) for _ in range(300)]))
    assert space.contains(chosen) and score < 0
    assert len(space.free) == 5 and score <= around.min() + 1e-12  # no setting one knob away is better
    assert score <= others.min() + 1e-12  # nor any of 300 other random settings


def test_per_iteration_time_drops_warmup_and_stalls():
    walls = np.concatenate([[0.0, 5.0], 5.0 + 0.01 * np.arange(1, 41)])
    walls[20:] += 2.0  # one stall of the machine
    assert per_iteration_time(walls, warmup=1) == pytest.approx(0.01)
    assert per_iteration_time(walls[:3], warmup=1) is None


@pytest.mark.fast
def test_a_segments_timing_noise_is_read_from_batches_of_its_gaps():
    """Independent gaps: their deviation. Gaps that alternate (asynchronous workers stepping in turn) time a mean
    far better than their deviation says; a machine that drifts, far worse."""
    rng = np.random.default_rng(0)
    independent = 0.01 * (1 + 0.5 * rng.standard_normal(2000)).clip(0.1)
    assert gap_spread(np.cumsum(independent), 0) == pytest.approx(independent.std() / independent.mean(), rel=0.3)
    alternating = np.tile([0.005, 0.015], 1000)
    assert gap_spread(np.cumsum(alternating), 0) < 0.1 * alternating.std() / alternating.mean()  # that is 0.5
    drifting = 0.01 * np.repeat([1.0, 1.2], 1000) * (1 + 0.05 * rng.standard_normal(2000))
    assert gap_spread(np.cumsum(drifting), 0) > 5 * drifting.std() / drifting.mean()
    assert gap_spread(np.cumsum(independent[:49]), 0) is None  # too few gaps for 10 batches of 5
    assert iterations_to_time(0.5, 0.05) == 100 and iterations_to_time(0.0, 0.05) == 0


@pytest.mark.fast
def test_a_random_segments_timing_lasts_at_most_its_ceiling_at_the_latest_pace():
    """On a machine whose timing scatters widely, timing a setting within 5% would take thousands of
    iterations; with ``most_s`` (the manager's min_segment_s) a random segment lasts at most the iterations that
    take most_s at the latest segment's pace."""
    rng = np.random.default_rng(1)
    walls = np.cumsum(0.01 * np.repeat(rng.lognormal(0.0, 1.0, 20), 50))  # 20 runs of 50 gaps, each at its own pace
    free, capped = Timing(), Timing(most_s=2.0)
    for timing in (free, capped):
        timing.segment_ended(walls, 0)
        timing.random = True
    assert free.iterations() > 5_000
    assert capped.iterations() == math.floor(2.0 / per_iteration_time(walls, 0)) < 1_000
    capped.random = False
    assert capped.iterations() is None  # only a random setting's segment is timed
    assert sim.make_manager(sim.space(), 0, min_segment_s=2.0).lengths.timing.most_s == 2.0  # the manager's ceiling
    assert not sim.make_manager(sim.space(), 0, min_segment_s=0).lengths.timing.most_s  # none: no least segment either


def test_a_random_setting_runs_until_it_is_timed_and_online_segments_last_their_least_duration():
    """The random phase's segments time their settings within TIMING_PRECISION (their ceiling, min_segment_s at
    the latest pace, is far above what that takes here) and need not last min_segment_s (30 s here; a segment of
    this surface takes about a second); the online phase's segments last min_segment_s at least, stretched."""
    workload = sim.Workload("NoisyKnownSurface", sim.NODES, sim.KnownSurface(), sim.CURVE, target_loss=0.3,
                            model_bytes=0.0, start_s=0.0, time_noise=0.5)
    job = sim.Segments(workload, 0, switch_cost_s=sim.SWITCH_COST_S)
    manager = sim.make_manager(sim.space(), 0, min_segment_s=30.0, random_settings=3, segment_iterations=20,
                               initial_iterations=100)
    timed, online, decision = [], 0, None
    for _ in range(6):
        length, seconds, stretch = manager.segment_length(), manager.segment_seconds(), manager.lengths.stretch
        run = job.run(manager.current, length)
        if decision is not None and decision.phase == "random" and decision.switch:  # a random setting's segment
            gaps = np.diff(run.walls)  # independent here
            timed.append(gaps.std() / gaps.mean() / math.sqrt(gaps.size))
            assert seconds == 0.0 and length > 20  # the gaps' spread is about 0.5: about 100 iterations
        elif decision is not None and decision.phase == "online":
            online += 1
            assert seconds == 30.0 * stretch
        decision = manager.on_segment_end(run)
        job.clock += sim.SWITCH_COST_S if decision.switch else 0.0
    assert len(timed) == 3 and max(timed) < 1.5 * TIMING_PRECISION and online >= 1


def test_cost_model_learns_per_set_of_changed_parts():
    costs = CostModel({"I-a": 2.0, "I-b": 3.0, "II": 1.0, "compile": 10.0})
    assert costs.estimate({}) == 0.0
    assert costs.estimate({"ps": "I-a", "intra_op_parallelism_threads": "II"}) == 2.0  # the largest prior
    assert costs.estimate({"global_jit_level=ON_1": "compile"}) == 10.0
    costs.record(["intra_op_parallelism_threads"], 0.2)
    costs.record(["intra_op_parallelism_threads"], 0.4)
    assert costs.estimate({"intra_op_parallelism_threads": "II"}) == pytest.approx(0.3)  # measured: the mean
    costs.record(["ps", "global_jit_level=ON_1"], 30.0)
    assert costs.estimate({"ps": "I-a", "global_jit_level=ON_1": "compile"}) == pytest.approx(30.0)
    # Each part costs at most the cheapest switch it was part of ...
    assert costs.estimate({"global_jit_level=ON_1": "compile"}) == pytest.approx(30.0)
    costs.record(["ps", "worker"], 1.5)
    assert costs.estimate({"ps": "I-a"}) == pytest.approx(1.5)
    # ... so XLA's compile makes neither the other type-II knobs nor turning it off look costly.
    assert costs.estimate({"inter_op_parallelism_threads": "II", "intra_op_parallelism_threads": "II"}) == 1.0
    assert costs.estimate({"global_jit_level": "II"}) == 1.0


def test_a_switch_turning_xla_on_is_a_compile_part():
    space = sim.space()
    base = space.start({"ps": 1, "worker": 1, "global_jit_level": "OFF"})
    assert switch_parts(space.knobs, base, dict(base, global_jit_level="ON_2", worker=2)) == {
        "global_jit_level=ON_2": "compile", "worker": "I-a"}
    on = dict(base, global_jit_level="ON_1")
    assert switch_parts(space.knobs, on, base) == {"global_jit_level": "II"}
    assert switch_parts(space.knobs, base, base) == {}
    # With XLA staying on, a switch compiles again: new graphs and sessions.
    assert switch_parts(space.knobs, on, dict(on, worker=2)) == {"global_jit_level=ON_1": "compile", "worker": "I-a"}
    assert switch_parts(space.knobs, on, dict(on, global_jit_level="ON_2")) == {"global_jit_level=ON_2": "compile"}
    assert switch_parts(space.knobs, on, on) == {}


def test_exploring_stays_within_its_budget_and_exploiting_needs_none():
    """Switch costs of 2 s against a 10% budget: random settings and EI-only switches are
    drawn while their cost fits what is left; switches that confidently pay are made anyway."""
    space = sim.space()
    manager = sim.make_manager(space, 0, exploration_budget=0.1)
    manager.target_loss = 0.305
    job = sim.SimulatedJob(0)
    job.switch_cost_s = 2.0
    decisions, lefts, best, shares = [], [], [], []
    for _ in range(30):
        decision = manager.on_segment_end(job.run(manager.current, manager.segment_length()))
        decisions.append(decision)
        shares.append(manager.time_share())
        lefts.append(manager.exploration_left())  # what the decision saw: nothing is charged before the switch
        best.append(manager.best_per_iteration_s())
        if decision.switch:
            job.clock += job.switch_cost_s
            manager.record_cost(decision.parts, job.switch_cost_s)
    exploring = [(d, left) for d, left in zip(decisions, lefts)
                 if d.switch and (d.reason.startswith("initialisation: random setting") or "explore " in d.reason)]
    assert exploring and all(d.cost_s <= left + 1e-9 for d, left in exploring)
    random_ones = [d for d in decisions if d.reason.startswith("initialisation: random setting")]
    assert 1 <= len(random_ones) < 10 and all("left to explore" in d.reason for d in random_ones)
    # Every random setting not drawn says why: it waits for the budget to grow, or the job is too far along.
    waiting = [d for d in decisions if d.phase == "random" and d not in random_ones]
    assert all(" waits: no untried setting's switch fits the " in d.reason for d in waiting)
    # The phase waits for the budget; it ends only when the job is estimated 1 - budget through its time (on
    # one machine, after all 30 segments it still waited; on another, hogwild's estimate put this long job
    # (target 0.305, its loss 0.323 then) 91% through its time after 24: NOTES.md, thirty-third session).
    ended = next((i for i, d in enumerate(decisions) if d.phase != "random"), len(decisions))
    assert ended >= 10 and all(d.phase == "online" for d in decisions[ended:])
    assert ended == len(decisions) or (shares[ended] >= 0.9 and "too late for a random" in decisions[ended].reason)
    # Charged: each exploring switch's cost, and its segment's time against the best setting seen before it
    # (a credit when the segment was faster): 39 timed gaps of 40 iterations.
    explored_at = [i for i, d in enumerate(decisions) if (d, lefts[i]) in exploring]
    charged = 2.0 * len(explored_at) + sum(39 * (manager.triples[i + 1].per_iteration_s - best[i])
                                           for i in explored_at if i + 1 < len(manager.triples))
    assert manager.budget.spent_s == pytest.approx(charged)
    exploits = [d for d in decisions if d.switch and "exploit " in d.reason]
    assert exploits and all(d.expected_improvement_s is not None and d.cost_s < 1e3 for d in exploits)
    assert sim.time_per_progress(manager.current) < 0.5 * sim.time_per_progress(decisions[0].current)


def test_a_waiting_random_phase_fits_the_gp_only_once_the_share_pays_for_its_first_fit():
    """Random draws wait for the exploration budget (switches of 2 s against 10%); while they wait, a decision
    fits the GP for the first time only once the overhead share (2%) of the job so far pays for a fit
    (FIRST_FIT_S), as a draw's pricing does. On a LogR benchmark job, a waiting decision's first fit (0.48 s of
    CPU, 2.4 s into the job) held the job 20 s on one setting until the share was repaid."""
    space = sim.space()
    manager = sim.make_manager(space, 0, 0.305, exploration_budget=0.1, overhead_share=0.02)
    job = sim.SimulatedJob(0, 0.305)
    job.switch_cost_s = 2.0
    made, first = [], None
    while first is None and len(made) < 60:
        spent = manager.overhead.spent_s
        [decision] = job.drive(manager, 1)  # no time passes for a decision: it saw the elapsed time it leaves
        made.append(decision)
        if decision.gp_fit is not None:
            first = (spent, manager.elapsed_s)
    assert first is not None and first[0] + FIRST_FIT_S <= 0.02 * first[1]
    held = [d for d in made if d.reason.endswith("the GP's first fit waits for the overhead share")]
    assert held and all(d.phase == "random" and " waits: " in d.reason and not d.switch for d in held)


def test_late_in_the_job_is_judged_by_the_estimated_share_of_its_time():
    """The random phase ends once the job is an estimated (1 − budget) through its time (elapsed / (elapsed +
    R̂)), not when its loss has covered that share of its way: a loss falls fastest early."""
    space = sim.space()
    manager = sim.make_manager(space, 0)
    job = sim.SimulatedJob(0)
    decision = manager.on_segment_end(job.run(manager.current, 40))
    assert manager.time_share() < 0.8
    assert decision.switch and decision.reason.startswith("initialisation: random setting 1 of 10")
    # A job whose R̂ is a tenth of its time so far is about 91% through: no random setting pays off any more.
    manager.history.triple = lambda r: Triple(r.setting, r.loss_before, 0.01, 1.0, 0.1 * manager.elapsed_s)
    late = manager.on_segment_end(job.run(manager.current, 40))
    share = re.search(r"the job is an estimated (\d+)% through its time", late.reason)
    assert late.phase == "online" and share and int(share[1]) >= 90 and manager.time_share() > 0.9
    assert "too late for a random setting to pay off" in late.reason


def test_once_the_eta_answers_with_earlier_runs_the_jobs_length_is_read_from_it():
    """The job's time left, for judging how far along it is and for the exploration budget, is the ETA's
    iterations left (less those run since) at the latest R̂'s time per iteration once the ETA answers with the
    job's earlier runs; before, the latest R̂. An answer that is no number of iterations is not taken."""
    space = sim.space()
    manager = sim.make_manager(space, 0, exploration_budget=0.1)
    job = sim.SimulatedJob(0)
    for _ in range(3):
        manager.on_segment_end(job.run(manager.current, 40))
    latest, elapsed = manager.triples[-1], manager.elapsed_s
    assert manager.time_share() == pytest.approx(elapsed / (elapsed + latest.remaining_s))
    before = manager.exploration_left()
    done = job.step  # iterations run so far
    for nonsense in (math.nan, -1.0, math.inf):
        manager.history.eta_answered(done, nonsense)
        assert manager.time_share() == pytest.approx(elapsed / (elapsed + latest.remaining_s))
    manager.history.eta_answered(done - 100, 10 * done)  # answered 100 iterations ago
    left_s = (10 * done - 100) * latest.per_iteration_s
    assert manager.time_share() == pytest.approx(elapsed / (elapsed + left_s))
    assert manager.exploration_left() == pytest.approx(0.1 * (elapsed + left_s) - manager.budget.spent_s)
    assert (manager.exploration_left() > before) == (left_s > latest.remaining_s)
    manager.history.eta_answered(done - 100, 50)  # its iterations run out: the job is taken as at its end
    assert manager.time_share() == pytest.approx(1.0)


def test_with_no_budget_only_confident_gains_switch():
    """A resumed job whose history shows a clearly better setting moves to it, without any exploration."""
    space = sim.space()
    slow = sim.make_manager(space, 0).current
    fast = space.start({"ps": 1, "worker": 3, "intra_op_parallelism_threads": 4,
                        "inter_op_parallelism_threads": 2, "global_jit_level": "OFF"})
    history = []
    for i in range(6):
        loss = 0.6 - 0.02 * i
        for setting in (slow, fast):
            per_iteration = sim.time_per_progress(setting)
            history.append(Triple(setting, loss, per_iteration, 1000.0, 1000.0 * per_iteration))
    manager = sim.make_manager(space, 0, exploration_budget=0.0, history=history, random_settings=3)
    decisions = sim.SimulatedJob(0).drive(manager, 8)
    assert decisions[0].switch and decisions[0].candidate == fast
    assert decisions[0].reason.startswith("exploit")
    assert not any(d.reason.startswith("explore") for d in decisions)


def test_without_a_budget_the_random_phase_runs_all_its_settings():
    space = sim.space()
    manager = sim.make_manager(space, 0, exploration_budget=None)
    job = sim.SimulatedJob(0)
    job.switch_cost_s = 1e3
    decisions = job.drive(manager, 12)
    assert [d.phase for d in decisions[:10]] == ["random"] * 10 and decisions[10].phase == "online"


def _costly(call, cpu_s: float):
    """``call``, taking ``cpu_s`` more of the thread's CPU time first: a GP fit or suggestion as costly as a real
    job's."""

    def costly(*args, **kwargs):
        started = time.thread_time()
        while time.thread_time() - started < cpu_s:
            pass
        return call(*args, **kwargs)

    return costly


@pytest.mark.parametrize("share", [0.02, 0.5, None])
def test_a_segment_lasts_long_enough_for_the_decisions_to_take_at_most_their_share(share):
    """overhead_share: after each decision, the next segment lasts until the tuner's time so far is within the
    share of the job's (deciding takes at most that share of the job, give or take the latest decision); None
    leaves only min_segment_s (0 here). A random setting's segment is not stretched so (the next test), nor the
    first of a chosen setting no segment of the job has timed."""
    space = sim.space()
    manager = sim.make_manager(space, 0, overhead_share=share)
    job, stretched = sim.SimulatedJob(0), 0
    for _ in range(16):
        (decision,) = job.drive(manager, 1)
        assert decision.overhead_s > 0
        held_s = manager.overhead_s + manager.overhead.reserve_s  # and a fit's cost, once a refit is wanted
        expected = 0.0 if share is None else max(0.0, held_s / share - manager.elapsed_s)
        unstretched = manager.lengths.timing.random or manager.lengths.unmeasured
        assert manager.segment_seconds() == pytest.approx(0.0 if unstretched else expected)
        stretched += not unstretched and expected > 0
    if share == 0.02:  # the tuner is over 2% of these short simulated segments after every decision
        assert stretched > 0


def test_a_random_settings_segment_is_not_stretched_when_a_fit_takes_the_tuner_over_its_share():
    """The random phase prices its draws with the GP once the share pays for a fit at the guessed cost
    (FIRST_FIT_S); a fit that costs more (1 s of CPU here) takes the tuner over its share. The random setting's
    segment still ends once timed: the next random decisions fit no more until the share pays, and the first
    online segment on a setting the job has timed lasts until the tuner is within its share again (one no segment
    has timed runs its usual length first)."""
    space = sim.space()
    share = 0.1
    manager = sim.make_manager(space, 0, overhead_share=share)
    manager.optimizer.fit = _costly(manager.optimizer.fit, 1.0)
    job, over_share = sim.SimulatedJob(0), []
    for _ in range(11):
        (decision,) = job.drive(manager, 1)
        over = (manager.overhead_s + manager.overhead.reserve_s) / share - manager.elapsed_s
        if decision.phase == "random":
            assert manager.segment_seconds() == 0.0  # min_segment_s is 0 here
            over_share.append(over > 0)
    assert decision.phase == "online"
    if manager.lengths.unmeasured:
        assert manager.segment_seconds() == 0.0
        (decision,) = job.drive(manager, 1)
        over = (manager.overhead_s + manager.overhead.reserve_s) / share - manager.elapsed_s
    assert not manager.lengths.unmeasured and manager.segment_seconds() == pytest.approx(max(0.0, over))
    assert any(over_share) and sum(over_share) < len(over_share)  # over its share after the fit, then back


def test_decisions_refit_the_gp_as_often_as_the_overhead_share_pays_for():
    """The first online decision that asks the GP fits its hyperparameters unless a random one did; a later one
    refits only when the tuner's time so far and one more fit (at the latest fit's cost) stay within the share
    of the job's elapsed time; the others reuse the latest fit. A random decision asks the GP (to price its
    draw) only when the share pays for a fit (before any, at FIRST_FIT_S), and no decision fits twice."""
    space = sim.space()
    manager = sim.make_manager(space, 0, 0.305, overhead_share=0.05, segment_iterations=150)  # the job lasts
    suggest, fit, asked, fitted = manager.optimizer.suggest, manager.optimizer.fit, [], []

    def spy(*args, refit=True, **kwargs):
        suggestion = suggest(*args, refit=refit, **kwargs)
        asked.append((refit, suggestion.refitted))
        return suggestion

    def fit_spy(*args, **kwargs):
        model = fit(*args, **kwargs)
        fitted.append(model.refitted)
        return model

    manager.optimizer.suggest, manager.optimizer.fit = spy, fit_spy
    job, fit_cost, refits, priced, held = sim.SimulatedJob(0, 0.305), None, [], 0, 0
    for _ in range(30):
        spent, before, fits_before = manager.overhead_s, len(asked), len(fitted)
        (decision,) = job.drive(manager, 1)
        elapsed = manager.elapsed_s  # the decision was taken after the segment, as now
        assert sum(fitted[fits_before:]) <= 1
        if len(asked) == before:  # a random setting: the GP only prices its draw, when the share pays for a fit
            affordable = spent + (FIRST_FIT_S if fit_cost is None else fit_cost) <= 0.05 * elapsed
            if len(fitted) > fits_before:
                priced += 1
                assert affordable
            elif manager.decisions > 2:  # two observations or more: held back by the share alone
                held += 1
                assert not affordable
        else:
            refit, refitted = asked[-1]
            assert refitted == refit  # the kernel keeps its form on one job
            assert refit == (len(fitted) == fits_before + 1 and (
                fit_cost is None or spent + fit_cost <= 0.05 * elapsed))
            refits.append(refit)
        if any(fitted[fits_before:]):
            fit_cost = decision.overhead_s
    assert priced >= 1 and held >= 1 and refits.count(True) >= 2 and refits.count(False) >= 2, (priced, held, refits)


@pytest.mark.parametrize("inherits", [False, True])
def test_a_job_whose_decisions_spend_its_overhead_share_still_refits_as_its_observations_grow(inherits):
    """Each decision takes 0.2 s of CPU without a fit (on the CNN benchmark, conditioning the GP and maximising
    EI over its space), and each segment lasts until the tuner is back within its 5% share, so no slack is left
    for a fit. Once the observations have grown half again since the latest fit, the segment also holds back a
    fit's cost (REFIT_GROWTH): the GP is refitted before they double. Without that reserve a tuned CNN job took
    its one fit, of 6 observations, for 179 decisions (NOTES.md, forty-third session). A job started from an
    earlier job's observations and fit counts from the observations it inherits (a resumed CNN benchmark job
    never refitted: forty-fourth session)."""
    space, start = sim.space(), {}
    if inherits:
        first = sim.make_manager(space, 0, 0.305, random_settings=3)
        made = sim.SimulatedJob(0, 0.305).drive(first, 8)
        start = dict(history=[replace(t, source="first") for t in first.triples], random_settings=0,
                     gp_fit=[d.gp_fit for d in made if d.gp_fit is not None][-1])
    manager = sim.make_manager(space, 0, 0.305, overhead_share=0.05, **start)
    manager.optimizer.suggest = _costly(manager.optimizer.suggest, 0.2)
    job, fitted_on = sim.SimulatedJob(0, 0.305), [len(manager.history.observations())] if inherits else []
    for _ in range(30):
        (decision,) = job.drive(manager, 1, timed=True)  # each segment lasts its seconds too, as the driver runs it
        if decision.gp_fit is not None:
            fitted_on.append(len(manager.history.observations()))
    observations = len(manager.history.observations())
    print(f"fitted on {fitted_on} of {observations} observations")
    assert len(fitted_on) >= 2 and all(b <= 2 * a for a, b in zip(fitted_on, fitted_on[1:] + [observations])), (
        fitted_on, observations)
    # within its 5% share, give or take the latest decisions (a first segment of a setting is not stretched; a
    # make test run here measured 12.0 s of 226.5, 5.3%)
    assert manager.overhead_s <= 0.06 * manager.elapsed_s, (manager.overhead_s, manager.elapsed_s)


@pytest.mark.parametrize("kwargs, message", [
    (dict(initial_iterations=0), "initial_iterations must be an integer >= 1, got 0"),
    (dict(random_settings=-1), "random_settings must be an integer >= 0, got -1"),
    (dict(segment_iterations=2), "segment_iterations must be an integer >= 3 or None, got 2"),
    (dict(min_segment_s="1"), "min_segment_s must be a number >= 0, got '1'"),
    (dict(exploration_budget=1.5), "exploration_budget must be a fraction between 0 and 1, or None, got 1.5"),
    (dict(overhead_share=0), "overhead_share must be a fraction > 0 and <= 1, or None, got 0"),
])
def test_invalid_loop_options(kwargs, message):
    space = sim.space()
    with pytest.raises(ConfigurationError, match=message):
        TuningManager(space, space.start({}), 0.3, lambda: get_estimator("hogwild"), **kwargs)


def test_the_gp_window_keeps_the_latest_observations_and_one_of_every_older_setting():
    from tfonline.tuner._gpyopt import window

    a, b, c = ({"ps": i} for i in (1, 2, 3))
    old = [Observation(a, 0.9, 10.0), Observation(b, 0.8, 9.0), Observation(a, 0.7, 8.0)]
    recent = [Observation(c, 0.6 - 0.01 * i, 7.0) for i in range(5)]
    assert window(old + recent, size=5) == [old[1], old[2]] + recent  # a's latest, b's only, then the recent
    assert window(recent, size=5) == recent
    assert window(old + recent + [Observation(a, 0.5, 6.0)], size=5)[0] == old[1]  # a is recent again


def test_the_loss_trend_reads_a_noisy_line_and_triples_under_the_target_are_unusable():
    rng = np.random.default_rng(0)
    steps = np.arange(1, 2001, dtype=float)
    losses = 0.7 - 0.00005 * steps + rng.normal(0, 0.05, steps.size)  # noise 0.05, as a minibatch loss
    trend = loss_trend(list(steps), list(losses), 2000)
    assert trend == pytest.approx(0.6, abs=0.01)  # the latest 500 losses; a single loss is off by up to ~0.15
    assert abs(loss_trend(list(steps), list(losses), 1500) - 0.625) < 0.015
    # A loss that falls steeply and bends (a CNN's first iterations): the line read at the window's end is
    # below 0, below every loss of the window; the trend is held at the lowest of them.
    steps = np.arange(125, 625, dtype=float)
    losses = 0.15 + 3.0 * np.exp(-(steps - 100) / 90) + rng.normal(0, 0.05, steps.size)
    slope, intercept = np.polyfit(steps, losses, 1)
    assert slope * 624 + intercept < 0 < losses.min()
    assert loss_trend(list(steps), list(losses), 624) == losses.min()

    space = sim.space()
    manager = sim.make_manager(space, 0)
    job = sim.SimulatedJob(0)
    manager.on_segment_end(job.run(manager.current, 40))
    manager.target_loss = 1.0  # every later loss is under it
    decision = manager.on_segment_end(job.run(manager.current, 40))
    triple = manager.triples[-1]
    assert not triple.usable and triple.reason.startswith("the loss trend 0.")
    assert triple.reason.endswith("is already at the target 1")
    assert decision is not None


@pytest.mark.parametrize("seed", [0])  # 11-14 s a seed on 2 cores (seeds 1 and 2 passed too: the suite's time is short)
def test_a_setting_that_needs_more_iterations_loses_to_one_that_finishes_first(seed):
    """Four asynchronous workers take the least time per iteration but need 1.67x the iterations of two
    (staleness): the job starts on four and ends on a setting within 10% of the best time to the target: the
    one it runs most over its last 10 decisions, with few tries of another."""
    space = sim.stale_space()
    manager = TuningManager(space, space.start({"worker": 4}), 0.305, lambda: get_estimator("hogwild"),
                            initial_iterations=100, random_settings=3, segment_iterations=100, min_segment_s=0,
                            seed=seed, overhead_share=None)  # drive() lets no time pass for decisions (simulated.py)
    decisions = sim.stale_job(seed).drive(manager, 40)

    def time_per_progress(s):
        return sim.STALE_T[s["worker"]] * (1 + 0.5 * (s["worker"] - 1))

    best = min(time_per_progress({"worker": w}) for w in sim.STALE_T)
    assert min(sim.STALE_T, key=sim.STALE_T.get) == 4 and time_per_progress({"worker": 4}) > 1.2 * best
    last = [time_per_progress(d.candidate if d.switch else d.current) / best for d in decisions[-10:]]
    print(f"seed {seed}: workers " + "".join(str((d.candidate if d.switch else d.current)["worker"])
                                             for d in decisions))
    settled = [(d.candidate if d.switch else d.current)["worker"] for d in decisions[-10:]]
    most = max(set(settled), key=settled.count)
    assert most != 4 and time_per_progress({"worker": most}) <= 1.10 * best, settled
    # It may still try four now and then (1.21x): once in 10 decisions on 3 (1.09x) is 1.103x on average.
    assert np.mean(last) <= 1.12, last


@pytest.mark.parametrize("seed", [0])  # about 40 s on this slow 2-core machine; seeds 1-3 in NOTES.md
def test_the_loop_follows_a_fastest_setting_that_moves_halfway(seed):
    """The fastest worker count moves from 4 to 2 halfway to the target (simulated.MOVED_T, no staleness). Only
    the current setting is measured then, and the GP alone read its slowdown as the whole job's: on this seed
    the job stayed on 4 workers (1.75x the new best) for all 16 segments after the change. Measuring again what
    may now win (tfonline.tuner.recheck) has it on 2 workers within 4 segments, and mostly there after."""
    job, target = sim.moving_job(seed, 0.31), 0.31
    manager = sim.make_manager(sim.stale_space(), seed, target)
    workers, reasons, change = [], [], None
    while change is None or len(workers) < change + 16:
        if change is None and job.progress >= job.workload.moves_at:
            change = len(workers)
        decision = manager.on_segment_end(job.run(manager.current, manager.segment_length()))
        if decision.switch:
            job.clock += sim.SWITCH_COST_S
            manager.record_cost(decision.parts, sim.SWITCH_COST_S)
        workers.append(manager.current["worker"])
        reasons.append(decision.reason)
        assert len(workers) < 100, "the change never came"
    after = workers[change:]
    print(f"seed {seed}: workers before the change {''.join(map(str, workers[:change]))}, "
          f"after {''.join(map(str, after))}")
    assert min(sim.STALE_T, key=sim.STALE_T.get) == 4 and min(sim.MOVED_T, key=sim.MOVED_T.get) == 2
    assert 4 in workers[change - 3:change]  # it ran the old fastest before the change
    assert 2 in after[:4]
    settled = after[after.index(2):]
    assert settled.count(2) >= 0.75 * len(settled), after
    assert not any("measure again" in r for r in reasons[:change])  # nothing to measure again before it
    assert any("measure again" in r for r in reasons[change:change + 4])


class _BiasedCurve:
    """A reference whose pace is off by a factor that changes along the way (e^(share)), as an estimator's may be."""

    target_loss = 0.0

    def rate(self, loss):
        return math.exp(1.0 - loss)  # the loss runs from 1 (share 0) to 0 (share 1)


def test_speeds_compare_settings_near_the_same_loss_despite_a_reference_that_is_off():
    """Two worker counts, true speeds 1 and 0.6, measured against a reference whose pace drifts by e^share
    (the reference alone puts the ratio at 0.27 between the two ends): segments that alternate recover it, and
    so, through the bias's smoothness, do one count seen early and the other late."""
    rng = np.random.default_rng(0)
    true = {(1,): 1.0, (2,): 0.6}

    def slope(key, loss):  # the true pace is the reference's over e^share: a segment measures ρ·e^-share
        return SegmentSlope(loss, -true[key] * math.exp(1.0 - loss) * math.exp(-(1.0 - loss))
                            * (1 + 0.03 * rng.standard_normal()), 0.03)

    losses = np.linspace(0.95, 0.05, 20)
    keys = [(1,) if i % 2 == 0 else (2,) for i in range(20)]
    alternating = Speeds(keys, [slope(k, x) for k, x in zip(keys, losses)], _BiasedCurve(), 1.0)
    ratio = math.exp(alternating.at((2,), 0.5).log_mean - alternating.at((1,), 0.5).log_mean)
    assert ratio == pytest.approx(0.6, rel=0.1)
    naive = [-s.slope / _BiasedCurve().rate(s.loss_mid) for s in [slope((1,), 0.9), slope((2,), 0.1)]]
    assert naive[1] / naive[0] == pytest.approx(0.6 * math.exp(-0.8), rel=0.1)  # what the reference alone says
    apart = ["(1,)"] * 10 + ["(2,)"] * 10  # one count early, the other late
    separated = Speeds(apart, [slope((1,) if k == "(1,)" else (2,), x) for k, x in zip(apart, losses)],
                       _BiasedCurve(), 1.0)
    # Seen apart, the two are compared through the bias's smoothness alone: here (a smooth bias) still close.
    assert math.exp(separated.at("(2,)", 0.5).log_mean - separated.at("(1,)", 0.5).log_mean) == pytest.approx(0.6, rel=0.15)
    assert Speeds([], [], _BiasedCurve(), 1.0).at((3,), 0.5).log_var == pytest.approx(PRIOR_SD ** 2)


def test_another_jobs_segments_carry_over_how_its_settings_differ_not_its_pace():
    """Rule 6: another job (another learning rate) fell twice as fast per iteration as this job's curve, on 1 and
    3 workers, 3 needing 2x the iterations of 1; this job has run only 1 worker. 3 workers are then predicted
    at about half the speed of 1 here; with the other job's segments read as this job's own, 3 workers would
    look as fast as this job's 1 (2 x 0.5)."""
    rng = np.random.default_rng(1)
    true = {(1,): 1.0, (3,): 0.5}

    def slope(key, loss, level):
        return SegmentSlope(loss, -level * true[key] * (1 + 0.05 * rng.standard_normal()), 0.05 * level)

    rate = _BiasedCurve().rate  # a reference without bias: the slope over the rate is the speed
    other = [((w,), x) for x in np.linspace(0.9, 0.2, 12) for w in (1, 3)]
    own = [((1,), x) for x in np.linspace(0.9, 0.6, 6)]
    keys = [k for k, _ in other + own]
    slopes = [slope(k, x, 2.0 * rate(x)) for k, x in other] + [slope(k, x, rate(x)) for k, x in own]
    jobs = ["lr-0.3"] * len(other) + [None] * len(own)
    speeds = Speeds(keys, slopes, _BiasedCurve(), 1.0, jobs)
    ratio = math.exp(speeds.at((3,), 0.5).log_mean - speeds.at((1,), 0.5).log_mean)
    assert speeds.jobs == ["lr-0.3"] and ratio == pytest.approx(0.5, rel=0.15)
    assert math.exp(speeds.at((1,), 0.5).log_mean) == pytest.approx(1.0, rel=0.15)  # this job's pace, not 2x
    as_own = Speeds(keys, slopes, _BiasedCurve(), 1.0)
    assert math.exp(as_own.at((3,), 0.5).log_mean) > 0.8  # the other job's pace read as this job's


def test_speeds_shrink_differences_the_segments_cannot_tell_apart_and_keep_those_they_can():
    """Rules 1 and 3: noisy segments of three worker counts that converge alike are shrunk to near one another
    (the spread is at its floor); the same noise around speeds 1, 0.6 and 0.36 leaves them apart; a stint's
    segments are pooled before the clarity test, so a stint of segments each too noisy alone still counts."""
    def measured(true, seed):
        rng = np.random.default_rng(seed)
        keys, slopes = [], []
        for i, loss in enumerate(np.linspace(0.95, 0.05, 60)):
            key = (i // 4 % 3 + 1,)  # stints of 4 segments, the three keys in turn
            pace = true[key] * math.exp(1.0 - loss) * math.exp(-(1.0 - loss))
            slopes.append(SegmentSlope(loss, -pace * (1 + 0.6 * rng.standard_normal()), 0.6 * pace))
            keys.append(key)
        return Speeds(keys, slopes, _BiasedCurve(), 1.0)

    for seed in range(5):
        alike = measured({(1,): 1.0, (2,): 0.95, (3,): 0.9}, seed)
        assert alike.spread < 1.5 * MIN_SPREAD
        logs = [alike.at((w,), 0.5).log_mean for w in (1, 2, 3)]
        assert max(logs) - min(logs) < 0.2
        apart = measured({(1,): 1.0, (2,): 0.6, (3,): 0.36}, seed)
        assert apart.spread > 3 * MIN_SPREAD
        ratios = [math.exp(apart.at((w,), 0.5).log_mean - apart.at((1,), 0.5).log_mean) for w in (2, 3)]
        assert 1 > ratios[0] > ratios[1] and ratios[1] < 0.6
    # Four consecutive segments, each clear of zero by 1.5 standard errors only (under CLEAR_T), count as a stint;
    # the same four between segments of another key do not.
    faint = [SegmentSlope(loss, -1.5, 1.0) for loss in (0.8, 0.78, 0.76, 0.74)]
    clear = [SegmentSlope(loss, -1.0, 0.1) for loss in (0.79, 0.77, 0.75, 0.73)]
    assert Speeds([(1,)] * 4 + [(2,)] * 4, faint + clear, _BiasedCurve(), 1.0).keys == [(1,), (2,)]
    interleaved = [s for pair in zip(faint, clear) for s in pair]
    assert Speeds([(1,), (2,)] * 4, interleaved, _BiasedCurve(), 1.0).keys == [(2,)]


def test_a_stint_clear_of_zero_by_little_says_little_about_a_speed_the_prior_finds_unlikely():
    """Rule 1: a stint's log variance is read at a plausible speed. One short segment measured at 631 ± 252
    times the reference's pace (clear of zero by 2.5 standard errors: a tuned LogR job's trial near its target)
    leaves its key near the others, where its variance read at 631 ((se/m)² = 0.16) made it 45x faster (log
    speed 3.8 here) and the job stayed on a setting 1.6x slower per iteration; well measured stints still set
    their keys apart."""
    rng = np.random.default_rng(2)
    rate = _BiasedCurve().rate  # no bias: a slope over the rate is the speed
    keys, slopes = [], []
    for i, loss in enumerate(np.linspace(0.9, 0.2, 24)):
        key = (1,) if i // 3 % 2 == 0 else (3,)
        speed = 1.0 if key == (1,) else 0.6
        slopes.append(SegmentSlope(loss, -rate(loss) * speed * (1 + 0.05 * rng.standard_normal()), 0.05 * rate(loss)))
        keys.append(key)
    keys.append((2,))
    slopes.append(SegmentSlope(0.19, -631.0 * rate(0.19), 252.0 * rate(0.19)))
    speeds = Speeds(keys, slopes, _BiasedCurve(), 1.0)
    assert speeds.keys == [(1,), (2,), (3,)]  # the stint is clear of zero: it counts, for what it says
    one, three = (speeds.at((w,), 0.2).log_mean for w in (1, 3))
    assert math.exp(three - one) == pytest.approx(0.6, rel=0.1)
    noisy = speeds.at((2,), 0.2)
    assert one - 0.5 < noisy.log_mean < one + 0.5 and noisy.log_var > 0.5 * speeds.spread ** 2


@pytest.mark.parametrize("budget", [0.08, None])
def test_a_space_of_few_settings_ends_its_random_phase_once_all_have_run(budget):
    """Only the worker count is free (4 settings) and 10 random settings are asked: once the start and 3 random
    settings have run, the random phase ends and the online phase begins. Before, with a budget, the phase
    waited for an untried setting that could not come until the job was 92% through its time; without one,
    it ran tried settings again as "random"."""
    space = sim.stale_space()
    manager = TuningManager(space, space.start({"worker": 1}), 0.305, lambda: get_estimator("hogwild"),
                            initial_iterations=40, random_settings=10, segment_iterations=40, min_segment_s=0,
                            seed=0, overhead_share=None, exploration_budget=budget)
    decisions = sim.stale_job(0).drive(manager, 10)
    drawn = [d.candidate["worker"] for d in decisions if d.phase == "random" and d.reason.startswith("initialisation")]
    assert sorted(drawn) == [2, 3, 4] and manager.random_done == 3
    ended = next(d for d in decisions if d.phase == "online")
    assert ended.reason.startswith("random phase ended after 3 random setting(s): every setting of the space has run")
    assert all(d.phase == "online" for d in decisions[decisions.index(ended):])


def test_a_random_setting_is_left_for_the_best_setting_seen_when_the_mean_says_so():
    """Worker counts only; the job starts on the best (3 workers) and draws 1 random setting, slower.

    The first online decision goes back to 3 on every seed: by an exploit where the GP is sure, and by the
    rule for random settings where it is not (a random setting was drawn, not chosen, so the best setting
    seen needs only a mean gain above the switch's cost; before the rule, seed 4 stayed on 2 workers).
    """
    space = sim.space(ps=1, intra_op_parallelism_threads=sim.CORES, inter_op_parallelism_threads=2,
                      global_jit_level="OFF")
    reasons = []
    for seed in range(6):
        manager = TuningManager(space, space.start({"worker": 3}), 0.33, lambda: get_estimator("hogwild"),
                                initial_iterations=40, random_settings=1, segment_iterations=40, min_segment_s=0,
                                exploration_budget=None, seed=seed)
        drawn, back = sim.SimulatedJob(seed, target_loss=0.305).drive(manager, 2)
        assert drawn.phase == "random" and drawn.candidate["worker"] != 3
        assert back.switch and back.candidate["worker"] == 3, back.reason
        reasons.append(back.reason)
    assert any(r.startswith("leave random setting 1: the best setting seen is predicted ") for r in reasons)
    assert any(r.startswith("exploit ") for r in reasons)


def test_after_a_node_is_lost_the_gp_proposes_only_settings_the_nodes_left_can_run():
    """Observations at every layout; then the cluster has one node fewer: neither the GP's suggestions nor
    the best setting seen it may go back to need more nodes than are left."""
    space = sim.space()
    observations = _observations(space, 12, seed=3)
    assert max(o.setting["ps"] + o.setting["worker"] for o in observations) == space.node_count
    space.nodes_alive = space.node_count - 1
    current = min((o.setting for o in observations if space.fits(o.setting)),
                  key=lambda s: (s["ps"] + s["worker"], s["ps"]))
    suggestion = GPOptimizer(space, seed=5).suggest(observations, 0.5, current, hold=["global_jit_level"])
    proposed = [c.setting for c in suggestion.candidates] + [suggestion.best_known.setting]
    assert proposed and all(space.fits(s) for s in proposed)


def test_a_setting_a_lost_node_imposed_is_the_one_the_next_decision_leaves_from():
    """The driver switches without the tuner when a node is lost (tfonline._recovery): the tuner's current
    setting becomes the one imposed, and a job sent back to a checkpoint forgets the losses after it."""
    space = sim.space()
    manager = TuningManager(space, space.start({"worker": 3}), 0.33, lambda: get_estimator("hogwild"),
                            initial_iterations=40, random_settings=1, segment_iterations=40, min_segment_s=0,
                            exploration_budget=None, seed=0)
    job = sim.SimulatedJob(0, target_loss=0.305)
    job.drive(manager, 2)
    imposed = dict(manager.current, ps=1, worker=1)
    assert imposed != manager.current
    steps, losses = list(manager.history.steps), list(manager.history.losses)
    assert steps[:50] == list(range(1, 51)) and len(steps) > 50
    manager.moved_to(imposed, back_to=50)
    assert manager.current == imposed
    assert list(manager.history.steps) == steps[:50] and list(manager.history.losses) == losses[:50]
    manager.moved_to(dict(imposed, worker=2))  # a lost worker: the history stays
    assert manager.current == dict(imposed, worker=2) and list(manager.history.steps) == steps[:50]
    decision, = job.drive(manager, 1)
    assert decision.current == dict(imposed, worker=2)


def test_a_random_draw_priced_by_a_gp_that_predicts_no_time_is_priced_at_its_whole_segment():
    """A case recorded at the paper's scale, simulated (tests/gp_reused_fit_case.json): a fit of 4
    observations reused on 6 predicted a setting none of them had at exp(-1734) s per iteration, 0 in floats.
    Pricing the random draw divided by it, and the job's tuner failed (ZeroDivisionError). That setting is
    priced as without the GP, at its whole segment; the others as before."""
    import json
    import os

    from tfonline.simulator.run import paper_scale
    from tfonline.tuner.explore import segment_waste

    with open(os.path.join(os.path.dirname(__file__), "gp_reused_fit_case.json")) as f:
        case = json.load(f)
    space = paper_scale("async").space()
    observations = [Observation(**o) for o in case["observations"]]
    settings = case["bad"] + [space.sample(random.Random(i)) for i in range(50)]
    optimizer = GPOptimizer(space, seed=case["seed"])
    optimizer.adopt(case["form"], case["values"])
    fitted = optimizer.fit_seeded(observations, case["loss"], case["current"], refit=False)
    assert not fitted.refitted
    seconds = fitted.seconds(settings)
    assert seconds[0] == 0.0  # the case as it was recorded
    best = min(o.per_iteration_s for o in observations)
    shares = segment_waste(fitted, best)(settings)
    assert shares[0] == 1.0
    assert shares[1:] == [max(0.0, 1.0 - best / t) if t > 0 else 1.0 for t in seconds[1:]]
    assert all(0.0 <= share <= 1.0 for share in shares)


def test_a_flat_gp_leaves_a_slow_random_setting_for_the_best_one_measured():
    """A GP fit that predicts no difference anywhere (as a tuned CNN job's one fit did: NOTES.md, twenty-eighth
    session): here the real GP's suggestions with every gain and EI set to 0, and every confidence to 50%. The
    job leaves the last random setting, measured slower than the best seen, for that one, by measurement; and
    then makes no switch the GP would have to predict: nothing is predicted to pay. A speed trial (tfonline.tuner.trial)
    still runs four workers, whose convergence speed no segment has measured, for one stint; they measure slower
    per unit of progress, and the job goes back to the setting the trial left."""
    space = sim.space()
    manager = sim.make_manager(space, 0, 0.305)
    suggest = manager.optimizer.suggest

    def flat(*args, **kwargs):
        real = suggest(*args, **kwargs)

        def level(prediction):
            return prediction and replace(prediction, remaining_s=real.current_s, gain_s=0.0, confidence=0.5)

        return replace(real, candidates=[replace(c, expected_improvement_s=0.0, prediction=level(c.prediction))
                                         for c in real.candidates], best_known=level(real.best_known))

    manager.optimizer.suggest = flat
    decisions = sim.SimulatedJob(0).drive(manager, 15)
    last_random, first_online = decisions[9].candidate, decisions[10]
    per_progress = {setting_key(t.setting): sim.time_per_progress(t.setting) for t in manager.triples}
    best_seen = min(per_progress, key=per_progress.get)
    assert per_progress[setting_key(last_random)] > 1.3 * per_progress[best_seen] and len(per_progress) > 5
    assert first_online.switch and setting_key(first_online.candidate) == best_seen, first_online.reason
    assert first_online.reason.startswith("leave the random setting: by measurement")
    later = [d for d in decisions[11:] if d.switch]
    assert [d.reason.split(":")[0] for d in later] == ["speed trial of worker 4", "speed trial ended"], later
    assert later[1].candidate == later[0].current and later[1].reason.endswith(": back")


def test_a_setting_the_gp_chose_that_measures_slower_is_left_for_the_best_one_measured():
    """A GP sure of settings never run (as at the paper's scale, simulated, where a "100% sure" exploit left a
    setting at 0.060 s per iteration for one at 1.11 s, then went on to another never run: NOTES.md,
    twenty-ninth session): here its every online suggestion is a slow setting no segment has run, predicted
    to gain 1,000 s. The job exploits the first; once that has run a segment, measured far slower than the
    best setting seen, the job goes back to measured ground instead of on to the next guess."""
    space = sim.space()
    manager = sim.make_manager(space, 0, 0.305, random_settings=3)
    rng = random.Random(4)
    slow = [s for s in (space.sample(rng) for _ in range(200)) if sim.time_per_progress(s) > 0.04][:20]

    def sure(observations, loss, current, **kwargs):
        seen = {setting_key(t.setting) for t in manager.triples} | {setting_key(current)}
        guess = next(s for s in slow if setting_key(s) not in seen)
        prediction = _gpyopt.Prediction(guess, 10.0, 1000.0, 1.0)
        return _gpyopt.Suggestion([_gpyopt.Candidate(guess, 1000.0, prediction)], 1010.0, None)

    manager.optimizer.suggest = sure  # the GP's answer, fixed: what the loop does with it is tested
    decisions = sim.SimulatedJob(0, 0.305).drive(manager, 6)
    assert [d.phase for d in decisions[:3]] == ["random"] * 3
    first, tested = decisions[3], decisions[4]
    assert first.switch and first.reason.startswith("exploit s*: predicted gain 1e+03 s"), first.reason
    assert tested.switch and tested.reason.startswith("leave a setting run for the first time: by measurement, "
                                                      "the best setting seen finishes "), tested.reason
    assert tested.reason.endswith("; it was predicted faster")
    measured = {setting_key(t.setting) for t in manager.triples[:4]}  # the initial and random segments' settings
    assert setting_key(tested.candidate) in measured
    assert sim.time_per_progress(tested.candidate) * (1 + SURPRISE) < sim.time_per_progress(first.candidate)


def test_a_random_setting_just_measured_is_not_left_for_a_speed_trial():
    """Worker counts only, from two workers (the best per unit of progress on the stale surface), one random
    setting. Its one segment is no stint to compare a trial with (a tuned CNN job left a random setting timed over
    4 iterations for a trial, then went back to it on that timing), so the decision that judges it never starts a
    trial; later decisions may (on seed 4 a trial came straight after the random setting before)."""
    first_online, later = [], []
    for seed in range(6):
        space = sim.stale_space()
        manager = TuningManager(space, space.start({"worker": 2}), 0.305, lambda: get_estimator("hogwild"),
                                initial_iterations=100, random_settings=1, segment_iterations=100, min_segment_s=0,
                                seed=seed, overhead_share=None, exploration_budget=None)
        decisions = sim.stale_job(seed).drive(manager, 4)
        assert decisions[0].reason.startswith("initialisation: random setting 1 of 1")
        first_online.append(decisions[1].reason)
        later += [d.reason for d in decisions[2:]]
    assert not any(reason.startswith("speed trial") for reason in first_online), first_online
    assert any(reason.startswith("speed trial of worker ") for reason in later)
