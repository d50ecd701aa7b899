"""The progress display: plain lines when the output is not a terminal, a live panel in one, nothing when quiet."""

from __future__ import annotations

import io
import re

import pytest
from jobs import SlowerLogR
from rich.console import Console

from tfonline.progress import LiveView, Status, bar_text, done_fraction, eta_text, status_line


def _status(**changes):
    base = dict(job="LogR", step=120, loss=0.6432, target_loss=0.6, setting="ps2 w1 t2/2 jit:OFF", phase="online",
                seconds_per_iteration=0.0123, remaining_s=41.6, remaining_iterations=3380.0, estimator="hogwild",
                eta_reason=None, elapsed_s=12.2)
    base.update(changes)
    return Status(**base)


def test_a_line_shows_step_loss_setting_phase_pace_and_eta():
    line = status_line(_status())
    assert line == ("[tfonline] LogR step 120  loss 0.6432 (target 0.6)  ps2 w1 t2/2 jit:OFF  online  "
                    "0.012 s/it  ETA 42 s (3380 it, hogwild)  12 s  [#####...............]  23% of the estimated time")
    assert "initialisation (random settings)" in status_line(_status(phase="random"))


def test_the_bar_shows_the_share_of_the_estimated_time_or_else_of_the_losss_way():
    assert done_fraction(_status(elapsed_s=30.0, remaining_s=10.0)) == (0.75, "of the estimated time")
    no_eta = dict(remaining_s=None, remaining_iterations=None, eta_reason="no estimate yet")
    assert done_fraction(_status(**no_eta, first_loss=0.7, loss=0.64)) == pytest.approx((0.6, "of the loss's way "
                                                                                              "to the target"))
    assert done_fraction(_status(**no_eta, first_loss=0.7, loss=0.72))[0] == 0.0  # a loss that rose: not below 0
    assert done_fraction(_status(**no_eta, first_loss=0.7, loss=0.5))[0] == 1.0  # past the target: full
    assert done_fraction(_status(**no_eta, first_loss=None)) is None
    assert bar_text(_status(**no_eta, first_loss=0.7, loss=0.64), width=10) == "[######....]  60% of the loss's way to the target"
    assert bar_text(_status(**no_eta)) == "[?]"


def test_an_unknown_eta_says_why_and_shows_no_number():
    unknown = _status(remaining_s=None, remaining_iterations=None, eta_reason="the loss has not fallen yet")
    assert eta_text(unknown) == "ETA unknown (the loss has not fallen yet)"
    assert eta_text(_status(estimator=None, remaining_s=None)) == "ETA unknown (no estimator)"
    assert not re.search(r"ETA \d", status_line(unknown))


def test_the_live_view_draws_the_same_fields_in_a_terminal():
    out = io.StringIO()
    view = LiveView(Console(file=out, force_terminal=True, width=100))
    view.update(_status(step=10))
    view.close(_status(step=20, remaining_s=None, remaining_iterations=None, eta_reason="no estimate yet"))
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())  # without the terminal's control codes
    for field in ("step", "20", "loss", "0.6432 (smoothed; target 0.6)", "setting", "ps2 w1 t2/2 jit:OFF",
                  "phase", "online", "per iteration", "0.012 s", "ETA", "unknown (no estimate yet)", "progress",
                  "unknown (no ETA yet, and the loss has not moved towards its target)"):
        assert field in text
    out = io.StringIO()
    view = LiveView(Console(file=out, force_terminal=True, width=100))
    view.close(_status(elapsed_s=30.0, remaining_s=10.0))
    assert "75% of the estimated time" in out.getvalue() and "━" in out.getvalue()  # rich's bar


def test_a_job_writes_progress_lines_when_not_quiet_and_nothing_when_quiet(cluster, db_path, capsys):
    SlowerLogR().run(db=db_path, cluster=cluster, setting={"worker": 1}, quiet=False)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[tfonline] ")]
    assert lines, "no progress line"
    last = lines[-1]  # written at the end, whatever the job's length
    assert re.match(r"\[tfonline\] SlowerLogR step \d+  loss [0-9.]+ \(target 0\.6\)  ps1 w1 .*  fixed setting  "
                    r"[0-9.]+ s/it  ETA (\d+ s \(\d+ it, hogwild\)|unknown \(.+\))  \d+ s  \[[#.]{20}\] +\d+% of "
                    r"(the estimated time|the loss's way to the target)$", last), last
    SlowerLogR().run(db=db_path, cluster=cluster, setting={"worker": 1}, quiet=True)
    assert capsys.readouterr().out == ""
