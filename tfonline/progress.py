"""What a running job shows: a live display in a terminal, plain log lines elsewhere.

The runner hands a :class:`Status` to a view every so often. In a terminal
(``sys.stdout.isatty()``) :class:`LiveView` redraws one panel in place
(rich), with a progress bar; otherwise :class:`LineView` prints one line every
``LINE_INTERVAL_S``, which suits logs and CI. ``run(quiet=True)`` shows
nothing. An ETA the estimator cannot give yet is shown as unknown, with
its reason, never as a made-up number.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

LIVE_INTERVAL_S = 0.5
LINE_INTERVAL_S = 5.0
PHASE_WORDS = {
    "initial": "initialisation",
    "random": "initialisation (random settings)",
    "online": "online",
    "fixed": "fixed setting",
    "scheduled": "scheduled switches",
}


@dataclass(frozen=True)
class Status:
    job: str
    step: int
    loss: float | None  # smoothed
    target_loss: float
    setting: str  # short form
    phase: str
    seconds_per_iteration: float | None
    remaining_s: float | None
    remaining_iterations: float | None
    estimator: str | None
    eta_reason: str | None  # why there is no ETA, when there is none
    elapsed_s: float
    first_loss: float | None = None  # the smoothed loss the display first saw: where the loss's way starts


def done_fraction(status: Status) -> tuple[float, str] | None:
    """How far the job is, and by what: the share of its estimated time (time so far over that plus the
    ETA), or without an ETA the share of the loss's way from its first value to the target; None when
    neither is known."""
    if status.remaining_s is not None:
        total = status.elapsed_s + status.remaining_s
        return (status.elapsed_s / total if total > 0 else 1.0), "of the estimated time"
    first, loss, target = status.first_loss, status.loss, status.target_loss
    if first is not None and loss is not None and first > target:
        return min(max((first - loss) / (first - target), 0.0), 1.0), "of the loss's way to the target"
    return None


def bar_text(status: Status, width: int = 20) -> str:
    """``[#######.............]  35% of the estimated time``, or ``[?]`` when nothing says how far."""
    done = done_fraction(status)
    if done is None:
        return "[?]"
    fraction, basis = done
    filled = int(round(fraction * width))
    return f"[{'#' * filled}{'.' * (width - filled)}] {100 * fraction:3.0f}% {basis}"


def eta_text(status: Status, label: str = "ETA ") -> str:
    if status.estimator is None:
        return f"{label}unknown (no estimator)"
    if status.remaining_s is None:
        return f"{label}unknown ({status.eta_reason or 'no estimate yet'})"
    return f"{label}{status.remaining_s:.0f} s ({status.remaining_iterations:.0f} it, {status.estimator})"


def status_line(status: Status) -> str:
    """One line: step, smoothed loss against the target, setting, phase, time per iteration, ETA."""
    loss = "-" if status.loss is None else f"{status.loss:.4g}"
    pace = "-" if status.seconds_per_iteration is None else f"{status.seconds_per_iteration:.3f} s/it"
    return (f"[tfonline] {status.job} step {status.step}  loss {loss} (target {status.target_loss:g})  "
            f"{status.setting}  {PHASE_WORDS.get(status.phase, status.phase)}  {pace}  {eta_text(status)}  "
            f"{status.elapsed_s:.0f} s  {bar_text(status)}")


class LineView:
    """Plain log lines, one every ``interval_s`` (and the last one at the end)."""

    interval_s = LINE_INTERVAL_S

    def __init__(self, file=None):
        self.file = file or sys.stdout

    def update(self, status: Status) -> None:
        print(status_line(status), file=self.file, flush=True)

    def close(self, status: Status | None) -> None:
        if status is not None:
            self.update(status)


class LiveView:
    """A panel redrawn in place in a terminal (rich), left on screen when the job ends."""

    interval_s = LIVE_INTERVAL_S

    def __init__(self, console=None):
        from rich.console import Console
        from rich.live import Live

        self.console = console or Console()
        self._live = Live(console=self.console, auto_refresh=False, transient=False)
        self._live.start()

    @staticmethod
    def render(status: Status):
        from rich.table import Table

        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold")
        table.add_column()
        loss = "-" if status.loss is None else f"{status.loss:.4g}"
        pace = "-" if status.seconds_per_iteration is None else f"{status.seconds_per_iteration:.3f} s"
        table.add_row("tfonline", f"{status.job}, {status.elapsed_s:.0f} s")
        table.add_row("step", str(status.step))
        table.add_row("loss", f"{loss} (smoothed; target {status.target_loss:g})")
        table.add_row("setting", status.setting)
        table.add_row("phase", PHASE_WORDS.get(status.phase, status.phase))
        table.add_row("per iteration", pace)
        table.add_row("ETA", eta_text(status, label=""))
        table.add_row("progress", LiveView._bar(status))
        return table

    @staticmethod
    def _bar(status: Status):
        from rich.progress_bar import ProgressBar
        from rich.table import Table

        done = done_fraction(status)
        if done is None:
            return "unknown (no ETA yet, and the loss has not moved towards its target)"
        fraction, basis = done
        row = Table.grid(padding=(0, 1))
        row.add_row(ProgressBar(total=1.0, completed=fraction, width=30), f"{100 * fraction:.0f}% {basis}")
        return row

    def update(self, status: Status) -> None:
        self._live.update(self.render(status), refresh=True)

    def close(self, status: Status | None) -> None:
        if status is not None:
            self.update(status)
        self._live.stop()


def make_view(quiet: bool):
    """The view for this process's output: None when quiet, live in a terminal, lines elsewhere."""
    if quiet:
        return None
    return LiveView() if sys.stdout.isatty() else LineView()


class Ticker:
    """Calls a view at its interval; the runner's monitor loop asks it every 0.2 s."""

    def __init__(self, view):
        self.view = view
        self._next = time.monotonic() + (view.interval_s if view else 0)

    def due(self) -> bool:
        if self.view is None or time.monotonic() < self._next:
            return False
        self._next = time.monotonic() + self.view.interval_s
        return True
