"""The survey that measures settings again once the current one is seen to change (tfonline.tuner.recheck)."""

from __future__ import annotations

import math
import statistics

import pytest

from tfonline.tuner import Triple
from tfonline.tuner.recheck import (FIRST_RUN, MOST_RECHECKS, SURPRISE, Survey, first_run, measured_way_out,
                                    segment_noise, sooner_beyond_noise, stint_change)

pytestmark = pytest.mark.fast

# The worker count's times of the simulated job whose fastest count moves halfway (NOTES.md), in ms.
EARLY = {1: 20.0, 2: 11.0, 3: 9.0, 4: 8.0}


def measured(workers: int, ms: float) -> Triple:
    return Triple({"worker": workers}, 0.5, ms / 1000, 1000.0, ms)


def before_the_change() -> list[Triple]:
    """Each worker count measured once, then a stint on 4 workers whose latest segment is 75% slower."""
    return [measured(w, ms) for w, ms in EARLY.items()] + [measured(4, 8.1), measured(4, 8.0), measured(4, 14.0)]


def ask(survey: Survey, triples: list[Triple], current: int, left: float | None = None, cost: float = 0.1,
        allowed=lambda s: True):
    return survey.next(triples, {"worker": current}, 10_000, lambda s: 1.0, lambda s: cost, left, allowed)


def test_a_stint_that_slows_past_the_surprise_is_a_change_and_one_that_does_not_is_not():
    assert stint_change(before_the_change(), {"worker": 4}) == pytest.approx((0.008, 0.014))
    steady = before_the_change()[:-1] + [measured(4, 8.0 * (1 + SURPRISE) * 0.99)]
    assert stint_change(steady, {"worker": 4}) is None
    alone = [measured(w, ms) for w, ms in EARLY.items()] + [measured(4, 14.0)]
    assert stint_change(alone, {"worker": 4}) is None  # one earlier segment in the stint: too few to judge
    untimed = before_the_change() + [Triple({"worker": 4}, 0.5, None, None, None, "fewer than 3 timed iterations")]
    assert stint_change(untimed, {"worker": 4}) is None and ask(Survey(), untimed, 4) is None


def test_a_survey_measures_again_each_setting_that_may_now_win_while_the_measured_ones_moved_too():
    """4 workers slowed 8 -> 14 ms. 3 workers (9 ms before) is measured again first, and has moved (11 ms); then
    2 workers (11 ms before: 6.3 ms if it moved as much, the other way), which has (8 ms); 1 worker (20 ms) could
    not beat 8 ms even then, and the survey ends."""
    survey, triples = Survey(), before_the_change()
    first = ask(survey, triples, 4)
    assert first.setting == {"worker": 3} and "rose from 0.008 s to 0.014 s" in first.reason and first.cost_s == 0.1
    triples.append(measured(3, 11.0))
    second = ask(survey, triples, 3)
    assert second.setting == {"worker": 2} and "moved too, from 0.009 s to 0.011 s" in second.reason
    triples.append(measured(2, 8.0))
    assert ask(survey, triples, 2) is None and survey.since is None
    triples.append(measured(2, 8.0))
    assert ask(survey, triples, 2) is None  # no new survey: the stint on 2 workers has not slowed


def test_a_survey_ends_at_the_first_setting_measured_again_that_has_not_moved():
    survey, triples = Survey(), before_the_change()
    assert ask(survey, triples, 4).setting == {"worker": 3}
    triples.append(measured(3, 9.3))  # within the surprise of its 9 ms: only 4 workers changed
    assert ask(survey, triples, 3) is None and survey.since is None


def test_a_survey_measures_nothing_the_budget_or_the_nodes_do_not_allow_nor_what_cannot_pay():
    assert ask(Survey(), before_the_change(), 4, left=0.05) is None  # the switch costs 0.1 s
    assert ask(Survey(), before_the_change(), 4, allowed=lambda s: False) is None
    assert ask(Survey(), before_the_change(), 4, allowed=lambda s: s["worker"] == 1).setting == {"worker": 1}
    assert ask(Survey(), before_the_change(), 4, cost=100.0) is None  # more than 10,000 iterations could gain
    only_two = ask(Survey(), before_the_change(), 4, allowed=lambda s: s["worker"] != 3)
    assert only_two.setting == {"worker": 2}


def test_a_survey_measures_at_most_its_limit_of_settings():
    times = {w: 10.0 + w for w in range(1, 8)}
    triples = [measured(w, ms) for w, ms in times.items()] + [measured(8, 9.0), measured(8, 9.0), measured(8, 30.0)]
    survey, asked, current = Survey(), [], 8
    while (found := ask(survey, triples, current)) is not None:
        asked.append(found.setting["worker"])
        current = found.setting["worker"]
        triples.append(measured(current, times[current] * 2))  # each moved: slower by half
    assert asked == [1, 2, 3][:MOST_RECHECKS] and len(asked) == MOST_RECHECKS


# The CNN job that stayed on its last random setting (NOTES.md, twenty-eighth session): settings measured in the
# random phase, by worker count and time per iteration in ms, the last one the random setting the job is on.
RANDOM_PHASE = [(1, 125.0), (2, 72.0), (2, 66.0), (2, 69.0), (3, 70.0), (2, 72.5), (1, 104.0)]


def way_out(triples, iterations_left=2000.0, speed=lambda s: 1.0, cost=1.0, allowed=lambda s: True):
    return measured_way_out(triples, triples[-1].setting, iterations_left, speed, lambda s: cost, allowed)


def random_phase() -> list[Triple]:
    return [Triple({"worker": w, "n": i}, 0.5, ms / 1000, 1000.0, ms) for i, (w, ms) in enumerate(RANDOM_PHASE)]


def test_a_random_setting_measured_slower_than_the_best_seen_by_more_than_the_surprise_is_left_for_it():
    out = way_out(random_phase())
    assert out.setting == {"worker": 2, "n": 2} and out.cost_s == 1.0
    assert out.reason.startswith("leave the random setting: by measurement, the best setting seen finishes 76 s "
                                 "sooner (0.066 s per iteration of the job's curve, against 0.104 s here)")
    # a setting the job may not take (left recently, or it does not fit the nodes) is passed over
    assert way_out(random_phase(), allowed=lambda s: s.get("n") != 2).setting == {"worker": 2, "n": 3}


def test_a_random_setting_is_kept_when_it_is_within_the_surprise_or_the_gain_does_not_pay():
    close = random_phase()[:-1] + [Triple({"worker": 1}, 0.5, 0.066 * (1 + SURPRISE) * 0.99, 1000.0, 1.0)]
    assert way_out(close) is None
    assert way_out(random_phase(), iterations_left=26.0) is None  # 26 x 38 ms = 0.99 s, under the 1-s switch
    assert way_out(random_phase(), iterations_left=27.0) is not None


def test_the_way_out_counts_each_settings_convergence_speed():
    """One worker needs half the iterations here (speed 2): 104 ms per iteration is 52 ms of the job's curve,
    faster than the others' 66 ms."""
    assert way_out(random_phase(), speed=lambda s: 2.0 if s["worker"] == 1 else 1.0) is None


def test_a_setting_run_for_the_first_time_is_the_latest_segments_and_no_earlier_ones():
    triples = random_phase()
    assert first_run(triples, triples[-1].setting)  # {"worker": 1, "n": 6}: its one segment, the latest
    assert not first_run(triples, triples[0].setting)  # run once, but not in the latest segment
    assert not first_run(triples + [triples[-1]], triples[-1].setting)  # its second segment
    assert not first_run([], {"worker": 1})
    out = measured_way_out(triples, triples[-1].setting, 2000.0, lambda s: 1.0, lambda s: 1.0, lambda s: True,
                           FIRST_RUN)
    assert out.reason.startswith("leave a setting run for the first time: by measurement, the best setting seen ")
    assert out.reason.endswith("more than the estimated cost 1 s; it was predicted faster")


def test_a_setting_is_sooner_beyond_noise_only_when_its_segments_say_so_past_their_scatter():
    """Two settings' segments (ms per iteration); z = 1.645. The CNN's two settings that differed in CSE alone
    ran 73-78 ms alike: not sooner. A clear gap is; one segment has no measured noise; different speeds add
    their variances, and a slower convergence speed can undo a faster time per iteration."""
    def beyond(here, there, speed=lambda s: (0.0, 0.0), shared=True):
        triples = [measured(1, ms) for ms in here] + [measured(2, ms) for ms in there]
        return sooner_beyond_noise(triples, {"worker": 1}, {"worker": 2}, speed, shared, 1.645)

    assert not beyond([75.8, 77.8, 74.8], [72.7, 76.8, 75.8])  # the CNN's ping-pong
    assert beyond([75.8, 77.8, 74.8], [60.1, 61.5, 60.8])
    assert not beyond([75.8, 77.8, 74.8], [60.1])  # one segment: its noise is unknown
    assert not beyond([75.8], [60.1, 61.5, 60.8])
    uncertain = lambda s: (0.0, 0.01)  # noqa: E731  (log speed's SD 0.1 each, 0.14 together)
    # a 7% gap, 5.6 standard errors of the times: beyond, unless two speeds of SD 0.1 each are not shared
    assert not beyond([75.8, 77.8, 74.8], [70.1, 71.5, 70.8], speed=uncertain, shared=False)
    assert beyond([75.8, 77.8, 74.8], [70.1, 71.5, 70.8], speed=uncertain, shared=True)
    slower = lambda s: (-0.3 if s["worker"] == 2 else 0.0, 0.0)  # noqa: E731  (needs e^0.3 = 1.35x the iterations)
    assert not beyond([75.8, 77.8, 74.8], [60.1, 61.5, 60.8], speed=slower, shared=False)


def test_one_segments_noise_is_pooled_over_this_jobs_settings_run_more_than_once():
    """The spread of log time per iteration about each setting's own mean, pooled by degrees of freedom; a
    setting run once, an untimed segment and another job's segments say nothing of it."""
    logs = {1: [math.log(10.0), math.log(12.0)], 2: [math.log(20.0), math.log(23.0), math.log(18.0)]}
    triples = [measured(w, math.exp(log)) for w, ls in logs.items() for log in ls] + [measured(3, 5.0)]
    triples += [Triple({"worker": 1}, 0.5, None, None, None, "fewer than 3 timed iterations"),
                Triple({"worker": 1}, 0.5, 0.1, 1000.0, 100.0, source="an earlier job")]
    pooled = math.sqrt((statistics.variance(logs[1]) + 2 * statistics.variance(logs[2])) / 3)
    assert segment_noise(triples) == pytest.approx(pooled)
    assert segment_noise(triples[:3]) == pytest.approx(statistics.stdev(logs[1]))  # worker 2 once: left out
    assert segment_noise([measured(w, 10.0) for w in (1, 2, 3)]) == 0.0 == segment_noise([])
    assert segment_noise([measured(1, 10.0), measured(1, 10.0)]) == 0.0  # no spread
