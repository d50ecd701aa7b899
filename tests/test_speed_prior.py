"""The speed model as the GP's first guess of time per iteration (tfonline.tuner.speed.SpeedPrior)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import simulated as sim
from scipy.stats import spearmanr

from tfonline.tuner._gpyopt import GPOptimizer, Observation, _contained
from tfonline.tuner.speed import SpeedModel, SpeedPrior

pytestmark = pytest.mark.fast

# A cluster whose times follow the speed model's form (async; base, w/p, w, p, 1/intra, 1/inter, crowding, XLA).
TRUTH = SpeedModel([0.004, 0.003, 0.0005, 0.001, 0.006, 0.001, 0.004, 0.002, 0.004], 1, sim.CORES)


def _settings(count, seed):
    rng, space = random.Random(seed), sim.space()
    return [space.sample(rng) for _ in range(count)]


def _timed(settings, seed, scale=1.0, job=""):
    rng = np.random.default_rng(seed)
    return [Observation(s, 0.5, scale * TRUTH.iteration_s(s) * math.exp(rng.normal(0, 0.05)), job=job)
            for s in settings]


def _predict(observations, unseen, seed, speed_prior=True):
    optimizer = GPOptimizer(sim.space(), seed, speed_prior)
    with _contained(seed, 0):
        return optimizer.fit(observations, 0.5, observations[0].setting).predict(unseen)[0]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_speed_model_guesses_the_settings_never_tried(seed):
    """A job measured on 12 settings (5% noise): its GP ranks 20 settings it never tried by their true times
    far better with the speed model as its first guess than without, and is closer to them."""
    observed = _timed(_settings(12, seed), seed)
    unseen = _settings(20, seed + 100)
    truth = np.log([TRUTH.iteration_s(s) for s in unseen])
    prior = SpeedPrior.fit([o.setting for o in observed], [o.per_iteration_s for o in observed],
                           [o.job for o in observed], sim.CORES)
    assert prior is not None
    guessed = _predict(observed, unseen, seed)
    alone = _predict(observed, unseen, seed, speed_prior=False)  # no first guess: the GP alone
    assert spearmanr(guessed, truth)[0] > 0.9
    assert spearmanr(guessed, truth)[0] > spearmanr(alone, truth)[0] + 0.15
    assert np.mean(np.abs(guessed - truth)) < 0.7 * np.mean(np.abs(alone - truth))


def test_jobs_at_other_scales_share_one_shape():
    """Another job 3x slower everywhere and this one: the model's shape is fitted with each job's own scale
    (the first guess is of the shape; the GP and its job column take the level)."""
    other = _timed(_settings(10, 7), 7, scale=3.0, job="other")
    own = _timed(_settings(4, 8), 8)
    prior = SpeedPrior.fit([o.setting for o in other + own], [o.per_iteration_s for o in other + own],
                           [o.job for o in other + own], sim.CORES)
    unseen = _settings(20, 9)
    guess = prior.log_seconds(unseen)
    truth = np.log([TRUTH.iteration_s(s) for s in unseen])
    assert spearmanr(guess, truth)[0] > 0.9
    assert np.std(guess - truth) < 0.15  # one offset away from the truth


def test_no_first_guess_where_the_model_does_not_predict_or_has_too_little():
    """Times the setting does not explain (noise alone), or fewer than 6 settings: no prior, and the GP works
    as before."""
    for seed in range(3):
        settings = _settings(12, seed)
        noise = np.exp(np.random.default_rng(seed).normal(-4, 0.5, 12))
        assert SpeedPrior.fit(settings, noise, [""] * 12, sim.CORES) is None
    few = _settings(5, 4)
    assert SpeedPrior.fit(few, [TRUTH.iteration_s(s) for s in few], [""] * 5, sim.CORES) is None
