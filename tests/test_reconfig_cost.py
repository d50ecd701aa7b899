"""The cost of a switch (pure): the time the job lost, paused or live alike."""

from __future__ import annotations

import numpy as np
import pytest

from tfonline.reconfig.cost import switch_cost


pytestmark = pytest.mark.fast  # no TensorFlow cluster: `pytest -m fast` runs these in under a minute


def _run(from_step, from_wall, old_pace, during, stall, new_pace, count, start_step=None):
    """The new setting's first ``count`` iterations after a switch that began after ``from_step``.

    The old setting trains ``during`` more iterations at its pace, then nothing happens for ``stall``
    seconds, then the new setting's iterations come at its pace.
    """
    wall = from_wall + during * old_pace + stall
    step = from_step + during
    return [(step + k, 0.5, wall + k * new_pace) for k in range(1, count + 1)]


@pytest.mark.parametrize("seed", range(5))
def test_a_pause_costs_its_length_and_training_through_a_switch_costs_nothing(seed):
    rng = np.random.default_rng(seed)
    for _ in range(20):
        workers = int(rng.integers(1, 5))
        old, new = rng.uniform(0.01, 0.5, 2)
        stall = float(rng.uniform(0, 3))
        from_step, from_wall = int(rng.integers(0, 1000)), float(rng.uniform(0, 100))
        paused = _run(from_step, from_wall, old, 0, stall, new, 4 * workers + 1)
        cost, during = switch_cost(paused, workers, from_step, from_wall, old)
        assert during == 0 and cost == pytest.approx(stall, abs=1e-9)
        k = int(rng.integers(1, 30))
        live = _run(from_step, from_wall, old, k, 0.0, new, 4 * workers + 1)
        cost, during = switch_cost(live, workers, from_step, from_wall, old)
        assert during == k and cost == pytest.approx(0.0, abs=1e-9)
        # What a live switch makes the job wait (first steps that take longer) is its cost.
        cost, _ = switch_cost(_run(from_step, from_wall, old, k, stall, new, 4 * workers + 1), workers, from_step,
                              from_wall, old)
        assert cost == pytest.approx(stall, abs=1e-9)


def test_the_cost_is_never_negative_and_falls_back_to_the_old_pace():
    # The new setting's first iteration ends sooner than an old one would: nothing was lost.
    cost, during = switch_cost([(11, 0.5, 100.01)], 1, 10, 100.0, 0.2)
    assert (cost, during) == (0.0, 0)
    # One new iteration only (the job ended): timed at the old pace, 0.2 s.
    cost, _ = switch_cost([(11, 0.5, 101.0)], 1, 10, 100.0, 0.2)
    assert cost == pytest.approx(0.8)
    # Neither pace known: the whole span counts.
    cost, _ = switch_cost([(11, 0.5, 101.0)], 1, 10, 100.0, None)
    assert cost == pytest.approx(1.0)


def test_a_cost_needs_the_new_setting_to_have_stepped():
    with pytest.raises(ValueError, match="a switch's cost needs the new setting's first iteration"):
        switch_cost([], 2, 10, 100.0, 0.2)
