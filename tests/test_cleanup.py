"""Clean-up calls that may block for good are abandoned after a deadline, with a warning that says why."""

from __future__ import annotations

import logging
import threading

from tfonline._runner import _bounded


def test_a_blocked_cleanup_is_abandoned_with_a_warning(caplog):
    never = threading.Event()
    with caplog.at_level(logging.WARNING, logger="tfonline"):
        assert _bounded(never.wait, "resetting the job's containers on 4 nodes", timeout_s=0.1,
                        why="a node is gone, or nodes were restarted during the job") is False
    assert ("resetting the job's containers on 4 nodes did not finish within 0 s (a node is gone, or nodes were "
            "restarted during the job); abandoned") in caplog.text
    never.set()


def test_a_quick_cleanup_finishes_quietly(caplog):
    with caplog.at_level(logging.WARNING, logger="tfonline"):
        assert _bounded(lambda: None, "closing a session") is True
    assert caplog.text == ""
