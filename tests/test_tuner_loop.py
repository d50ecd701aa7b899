"""The tuning loop against a simulated backend with a known response surface, and the GPyOpt wrapper."""

from __future__ import annotations

import itertools
import random
import re
import warnings

import numpy as np
import pytest
import simulated as sim

from tfonline.estimator import get_estimator
from tfonline.exceptions import ConfigurationError
from tfonline.repository import Repository
from tfonline.tuner import Triple, load_triples
from tfonline.tuner import _gpyopt
from tfonline.tuner._gpyopt import GPOptimizer, Observation, _contained
from tfonline.timing import per_iteration_time
from tfonline.tuner.manager import CostModel, TuningManager, loss_trend
from tfonline.setting import Knob
from tfonline.reconfig import switch_parts
from tfonline.tuner.space import KnobSpace

DECISIONS = 40


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_loop_finds_a_setting_within_10_percent_of_the_optimum(seed):
    """Five free knobs (ps, worker, two thread pools, XLA); the start is about 8x slower than the optimum.

    Within 30 decisions (10 random, 20 online) the job runs a setting within
    10% of the optimum, and it spends at least 80% of the online decisions
    after that within 10% too (a GP fitted to noisy segments may still try
    a worse setting now and then).
    """
    space = sim.space()
    manager = sim.make_manager(space, seed)
    manager.target_loss = 0.305  # a long job: switching pays
    job = sim.SimulatedJob(seed)
    start = sim.time_per_progress(manager.current) / sim.optimum(space)
    decisions = job.drive(manager, DECISIONS)
    ratios = [sim.time_per_progress(d.candidate if d.switch else d.current) / sim.optimum(space) for d in decisions]
    print(f"seed {seed}: start {start:.2f}x the optimum; after each decision: "
          + " ".join(f"{r:.2f}" for r in ratios))
    assert start > 5
    found = next(i for i, r in enumerate(ratios) if r <= 1.10)
    assert found < 30
    after = ratios[max(found, 10):]
    assert sum(r <= 1.10 for r in after) >= 0.8 * len(after)
    assert [d.phase for d in decisions[:10]] == ["random"] * 10 and decisions[10].phase == "online"
    assert all(d.switch for d in decisions[:10])
    assert manager.overhead_s > 0 and all(d.overhead_s >= 0 for d in decisions)


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
    assert all("does not exceed the estimated cost" in d.reason for d in blocked)


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
                                "remaining_iterations": t.remaining_iterations, "remaining_s": t.remaining_s})
    repo.flush()
    history = load_triples(repo, "Sim", space)
    assert len(history) == sum(t.usable for t in first.triples) and all(isinstance(t, Triple) for t in history)
    assert [t.setting for t in history] == [t.setting for t in first.triples if t.usable]
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
    """The maximiser's choice is the best of every setting, scored by GPyOpt's own unzip_inputs and acquisition."""
    tag = Knob("tag", "nominal", "II", "session ConfigProto", choices=(0, 1, 2), apply=lambda config, value: None)
    space = KnobSpace(sim.NODES, sim.CORES, dict(sim.PINNED, tag=[0, 2]), extra_knobs=[tag])  # a one-hot of 2
    optimizer = GPOptimizer(space, seed=3)
    observations = _observations(space, 10)
    with _contained(3, 0):
        bo, _ = optimizer._fitted(observations, 0.5)
        chosen = optimizer._maximise(bo, 0.5, {})
        held = optimizer._maximise(bo, 0.5, {"global_jit_level": space.encode_value("global_jit_level", "ON_1")})
        every = [dict(zip(space.free, values)) for values in itertools.product(*(space.values[n] for n in space.free))]
        every = [dict(space.decode(space.encode(dict(space.defaults, **s))), **s) for s in every]
        every = [s for s in every if space.contains(s)]
        x = np.array([space.encode(s) + [0.5] for s in every])
        scores = np.ravel(bo.acquisition.acquisition_function(bo.space.unzip_inputs(x)))
        best = every[int(np.argmin(scores))]
        at_jit = [i for i, s in enumerate(every) if s["global_jit_level"] == "ON_1"]
        best_held = every[at_jit[int(np.argmin(scores[at_jit]))]]
    assert chosen == best and held == best_held and held["global_jit_level"] == "ON_1"
    assert len(every) > 100 and scores.min() < np.median(scores)  # a choice that matters


def test_in_a_large_space_ei_is_maximised_by_a_climb_to_a_local_optimum(monkeypatch):
    monkeypatch.setattr(_gpyopt, "ENUMERATE_AT_MOST", 300)  # of the 4 x 4 x 4 x 4 x 3 settings, 300 sampled
    space = sim.space()
    optimizer = GPOptimizer(space, seed=4)
    with _contained(4, 0):
        bo, _ = optimizer._fitted(_observations(space, 12, seed=1), 0.5)
        chosen = optimizer._maximise(bo, 0.5, {})
        x = np.array(space.encode(chosen))
        score = GPOptimizer._acquisition(bo, x[None, :], 0.5)[0]
        neighbours = [dict(chosen, **{name: v}) for name in space.free for v in space.values[name] if v != chosen[name]]
        neighbours = [s for s in neighbours if space.contains(s)]
        around = GPOptimizer._acquisition(bo, np.array([space.encode(s) for s in neighbours]), 0.5)
        rng = random.Random(9)
        others = GPOptimizer._acquisition(bo, np.array([space.encode(space.sample(rng)) for _ in range(300)]), 0.5)
    assert space.contains(chosen) and score < 0
    assert len(space.free) == 5 and score <= around.min() + 1e-12  # no setting one knob away is better
    assert score <= others.min() + 1e-12  # nor any of 300 other random settings


def test_per_iteration_time_drops_warmup_and_stalls():
    walls = np.concatenate([[0.0, 5.0], 5.0 + 0.01 * np.arange(1, 41)])
    walls[20:] += 2.0  # one stall of the machine
    assert per_iteration_time(walls, warmup=1) == pytest.approx(0.01)
    assert per_iteration_time(walls[:3], warmup=1) is None


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
    decisions, lefts, best = [], [], []
    for _ in range(30):
        decision = manager.on_segment_end(job.run(manager.current, manager.segment_length()))
        decisions.append(decision)
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
    first_online = next(d for d in decisions if d.phase == "online")
    ended = re.match(r"random phase ended after (\d+) random setting\(s\): the loss has covered (\d+)% of its way "
                     r"to the target, too late for a random setting to pay off; ", first_online.reason)
    assert ended and int(ended[1]) == len(random_ones) and int(ended[2]) >= 90  # 1 - the budget's 10%
    # Charged: each exploring switch's cost, and its segment's time against the best setting seen before it
    # (a credit when the segment was faster): 39 timed gaps of 40 iterations.
    explored_at = [i for i, d in enumerate(decisions) if (d, lefts[i]) in exploring]
    charged = 2.0 * len(explored_at) + sum(39 * (manager.triples[i + 1].per_iteration_s - best[i])
                                           for i in explored_at if i + 1 < len(manager.triples))
    assert manager.exploration_spent_s == pytest.approx(charged)
    exploits = [d for d in decisions if d.switch and "exploit " in d.reason]
    assert exploits and all(d.expected_improvement_s is not None and d.cost_s < 1e3 for d in exploits)
    assert sim.time_per_progress(manager.current) < 0.5 * sim.time_per_progress(decisions[0].current)


def test_an_estimate_far_too_low_early_does_not_end_the_random_phase():
    """Lateness is read from the loss: an R̂ a fifth of the switch's cost, early in the job, still lets a draw through."""
    space = sim.space()
    manager = sim.make_manager(space, 0)
    job = sim.SimulatedJob(0)
    run = job.run(manager.current, 40)
    run.walls[:] = np.linspace(0.0, 12.0, len(run.walls))  # a slow start (an XLA compile): 12 s
    manager.triple = lambda r: Triple(r.setting, r.loss_before, 0.01, 40, 0.4)  # R̂ 0.4 s, against a 2-s prior cost
    decision = manager.on_segment_end(run)
    assert manager.loss_progress() < 0.8
    assert decision.switch and decision.reason.startswith("initialisation: random setting 1 of 10; estimated cost 2 s")
    # Near the target, the phase ends whatever the budget: here the target is just under today's loss.
    manager.target_loss = loss_trend(manager.job_steps, manager.job_losses, manager.job_steps[-1]) - 0.002
    assert manager.loss_progress() > 0.8
    late = manager.on_segment_end(job.run(manager.current, 40))
    assert late.phase == "online" and "too late for a random setting to pay off" in late.reason


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


@pytest.mark.parametrize("kwargs, message", [
    (dict(initial_iterations=0), "initial_iterations must be an integer >= 1, got 0"),
    (dict(random_settings=-1), "random_settings must be an integer >= 0, got -1"),
    (dict(segment_iterations=2), "segment_iterations must be an integer >= 3 or None, got 2"),
    (dict(min_segment_s="1"), "min_segment_s must be a number >= 0, got '1'"),
    (dict(exploration_budget=1.5), "exploration_budget must be a fraction between 0 and 1, or None, got 1.5"),
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
