"""Clean-up calls that may block for good are abandoned after a deadline, with a warning that says why."""

from __future__ import annotations

import logging
import threading
import warnings

import pytest

from tfonline._calls import side_by_side


pytestmark = pytest.mark.fast  # no TensorFlow cluster: `pytest -m fast` runs these in under a minute


def test_a_blocked_cleanup_is_abandoned_with_a_warning(caplog):
    never = threading.Event()

    def fails():
        raise RuntimeError("a node is gone")

    with caplog.at_level(logging.WARNING, logger="tfonline"):
        finished = side_by_side([never.wait, lambda: None, fails], "resetting the job's containers on 3 nodes",
                                 why="a node is gone, or nodes were restarted during the job", timeout_s=0.1)
    assert finished == [False, True, True]  # an error ends a call; only the blocked one is abandoned
    assert ("resetting the job's containers on 3 nodes: 1 of 3 did not finish within 0 s (a node is gone, or nodes "
            "were restarted during the job); abandoned") in caplog.text
    never.set()


def test_a_quick_cleanup_finishes_quietly(caplog):
    with caplog.at_level(logging.WARNING, logger="tfonline"):
        assert side_by_side([lambda: None], "closing 1 session(s)") == [True]
    assert caplog.text == ""


def test_the_jobs_input_is_read_without_tf_data_autotuning_unless_the_input_fn_asks_for_it():
    """Destroying an iterator with autotuning on waits for its model thread's sleep (up to a minute): a node's
    reset at a job's end did, and held the next job of a sweep up to 47 s before its first iteration."""
    import tensorflow as tf

    from tfonline._graph import without_autotune

    plain = tf.data.Dataset.range(4).batch(2)
    assert plain.options().autotune.enabled is None  # tf.data's default: on
    assert without_autotune(plain).options().autotune.enabled is False
    assert list(without_autotune(plain).as_numpy_iterator())[1].tolist() == [2, 3]  # the same data
    for chosen in (True, False):
        options = tf.data.Options()
        options.autotune.enabled = chosen
        assert without_autotune(plain.with_options(options)).options().autotune.enabled is chosen
    with tf.Graph().as_default():  # as a job builds its input: quietly, the same
        options = tf.data.Options()
        options.autotune.enabled = True
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            kept = without_autotune(tf.data.Dataset.range(2).with_options(options))
            off = without_autotune(tf.data.Dataset.range(2))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # reading the options back in graph mode warns (the test's, not tfonline's)
            assert (kept.options().autotune.enabled, off.options().autotune.enabled) == (True, False)
