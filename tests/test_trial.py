"""Speed trials (tfonline.tuner.trial): when another worker count is run long enough to measure its speed, for
how long, and what the two stints then decide. Through the module's public seam, on hand-made triples."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tfonline.tuner.manager import Decision, Triple
from tfonline.tuner.trial import MIN_CHANCE, MIN_SEGMENTS, MOST_SHARE, Trials, expected_gain, expected_loss

pytestmark = pytest.mark.fast


def setting(workers, ps=1):
    return {"worker": workers, "ps": ps}


def triples(*runs):
    """One triple per (workers, time per iteration), in order."""
    return [Triple(setting(w, *rest), 1.0, t, None, None) for w, t, *rest in runs]


def start(trials, runs, current, speeds, *, iterations_left=10_000, left=None, cost=0.5, allowed=lambda s: True):
    """``speeds``: each worker count's (mean, variance) of log ρ̃."""
    return trials.start(triples(*runs), current, speed=lambda s: speeds[s["worker"]],
                        iterations_left=iterations_left, base_iterations=25, cost=lambda s: cost,
                        allowed=allowed, left=left)


def test_the_expected_gain_and_loss_are_the_means_of_their_parts_on_a_fixed_seed():
    draws = np.random.default_rng(0).normal(0.1, 0.4, 400_000)
    assert expected_gain(0.1, 0.4) == pytest.approx(np.mean(np.maximum(0, 1 - np.exp(-draws))), rel=0.01)
    assert expected_loss(0.1, 0.4) == pytest.approx(np.mean(np.maximum(0, 1 - np.exp(draws))), rel=0.01)
    assert expected_gain(0.3, 0.0) == pytest.approx(1 - math.exp(-0.3)) and expected_gain(-0.3, 0.0) == 0.0
    gains = [expected_gain(0.0, sd) for sd in (0.1, 0.3, 0.6)]
    assert 0 < gains[0] < gains[1] < gains[2]  # uncertainty alone makes a trial worth something


def test_a_worker_count_whose_speed_is_uncertain_is_tried_for_as_long_as_the_current_stint():
    """Three workers run 0.063 s an iteration, one 0.083 s; their speeds are the prior's (no clear stint of one
    worker): one worker may well finish sooner, so it is tried, with the stint three workers have run."""
    trials = Trials(["worker"])
    trials.segment_ended(300)
    uncertain = {1: (0.0, 0.25), 3: (0.0, 0.25)}
    found = start(trials, [(1, 0.083), (3, 0.063), (3, 0.063)], setting(3), uncertain)
    assert found is not None and found.setting == setting(1) and found.iterations == 300
    assert found.reason.startswith("speed trial of worker 1: ") and "likely by the speeds' uncertainty" in found.reason
    # Known alike, the faster iterations win: nothing to try.
    assert start(Trials(["worker"]), [(1, 0.083), (3, 0.063)], setting(3), {1: (0.0, 0.0001), 3: (0.0, 0.0001)}) is None


def test_a_trial_needs_a_chance_a_gain_above_its_price_and_the_budget():
    runs, current = [(1, 0.083), (3, 0.063)], setting(3)
    # Three workers known 1.7x slower to converge: one is tried...
    assert start(Trials(["worker"]), runs, current, {1: (0.0, 0.04), 3: (-0.53, 0.04)}) is not None
    # ... but not when the job has too few iterations left for the gain to pay for the switches,
    assert start(Trials(["worker"]), runs, current, {1: (0.0, 0.04), 3: (-0.53, 0.04)}, iterations_left=20) is None
    # nor when the budget cannot cover the price, nor when the chance is under MIN_CHANCE.
    assert start(Trials(["worker"]), runs, current, {1: (0.0, 0.04), 3: (-0.53, 0.04)}, left=0.1) is None
    # One worker known far slower to converge: P(it finishes sooner) = Φ((log(0.063/0.083) − 1)/0.42) ≈ 0.001,
    # though over 1e9 iterations left its expected gain (thousands of seconds) is far above the price of 100
    # iterations.
    worse = {1: (-1.0, 0.09), 3: (0.0, 0.09)}
    assert start(Trials(["worker"]), runs, current, worse, iterations_left=1e9) is None and MIN_CHANCE > 0.001
    # A setting the job may not run now (a lost node, or left recently) is not tried.
    uncertain = {1: (0.0, 0.25), 3: (0.0, 0.25)}
    assert start(Trials(["worker"]), runs, current, uncertain, allowed=lambda s: s["worker"] != 1) is None


def test_a_trials_stint_is_at_least_a_few_segments_and_at_most_a_share_of_what_is_left():
    for stint, iterations in ((10, MIN_SEGMENTS * 25), (5_000, int(MOST_SHARE * 10_000))):
        trials = Trials(["worker"])
        trials.segment_ended(stint)
        found = start(trials, [(1, 0.083), (3, 0.063)], setting(3), {1: (0.0, 0.25), 3: (0.0, 0.25)})
        assert found.iterations == iterations
    # A switch that keeps the worker count keeps the stint, and so does a decision to stay, whatever candidate it
    # weighed; a switch to another worker count starts a new one.
    trials.decided(Decision("online", setting(3), setting(3, ps=2), True, "exploit"))
    trials.decided(Decision("online", setting(3, ps=2), setting(1), False, "EI does not exceed the price"))
    assert trials.stint == 5_000
    trials.decided(Decision("online", setting(3, ps=2), setting(1), True, "exploit"))
    assert trials.stint == 0


def test_each_worker_count_is_tried_once_and_the_trial_runs_its_iterations_as_one_segment():
    trials = Trials(["worker"])
    runs, current, uncertain = [(1, 0.083), (2, 0.07), (3, 0.063)], setting(3), {1: (0.0, 0.25), 2: (0.0, 0.25),
                                                                               3: (0.0, 0.25)}
    first = start(trials, runs, current, uncertain)
    assert trials.pending and trials.running == first.setting
    assert start(trials, runs, current, uncertain) is None  # one at a time
    trials.segment_ended(first.iterations)
    assert not trials.pending
    trials.end(triples(*runs, (first.setting["worker"], 0.07)), speed=lambda s: (0.0, 0.0), iterations_left=1000,
               cost=lambda s: 0.5, allowed=lambda s: True)
    second = start(trials, runs, current, uncertain)
    assert second is not None and {first.setting["worker"], second.setting["worker"]} == {1, 2}
    trials.cancel()  # a node was lost: the trial is over, and its worker count counts as tried
    assert trials.running is None and not trials.pending and start(trials, runs, current, uncertain) is None


@pytest.mark.parametrize("trial_speed, back", [(0.5, True), (1.0, False)])
def test_after_its_stint_the_job_goes_back_only_when_the_setting_it_left_finishes_sooner(trial_speed, back):
    """One worker at 0.083 s an iteration against three at 0.063 s with speed 0.6: at speed 1.0 the trial's
    setting needs 0.083 s per iteration of the job's curve against 0.105, and stays; at 0.5, 0.166, and goes back."""
    trials = Trials(["worker"])
    runs, current = [(1, 0.083), (3, 0.063)], setting(3)
    assert start(trials, runs, current, {1: (0.0, 0.25), 3: (0.0, 0.25)}).setting == setting(1)
    trials.segment_ended(300)
    speeds = {1: (math.log(trial_speed), 0.01), 3: (math.log(0.6), 0.01)}
    went, cost, reason = trials.end(triples(*runs, (1, 0.083)), speed=lambda s: speeds[s["worker"]],
                                    iterations_left=1000, cost=lambda s: 0.5, allowed=lambda s: True)
    assert (went == current) is back and (went is None) is not back
    assert reason.startswith("speed trial ended: ") and reason.endswith(": back" if back else "it left)")
    assert trials.running is None
