"""Clean-up calls that may block for good are abandoned after a deadline, with a warning that says why."""

from __future__ import annotations

import logging
import threading

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
