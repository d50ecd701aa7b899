"""The shared training state: what the worker threads and the monitor both touch, under one lock.

Every iteration a worker completes goes through :meth:`TrainingState.record`;
every change of the steps the workers take goes through :meth:`publish` (a
switch) or :meth:`swap_steps` (a transition's end). Nothing else in the
driver takes the lock.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any, Callable

import numpy as np

from tfonline._columns import Columns
from tfonline._recorder import Recorder
from tfonline.exceptions import TfOnlineError
from tfonline.result import PATIENCE_MIN_IMPROVEMENT
from tfonline.setting import setting_key
from tfonline.timing import per_iteration_time
from tfonline.tuner.manager import SegmentRun


class SmoothedLoss:
    """Exponential moving average of the loss, bias-corrected.

    With window w the weight of a new loss is 2 / (w + 1); the value is
    divided by 1 - (1 - a)^n after n losses, so it is an unbiased average
    from the first iteration on. Convergence is only declared once n >= w.
    """

    def __init__(self, window: int):
        self.window = window
        self._alpha = 2.0 / (window + 1)
        self._raw = 0.0
        self.count = 0

    def add(self, loss: float) -> float:
        self.count += 1
        self._raw = (1 - self._alpha) * self._raw + self._alpha * loss
        return self.value

    @property
    def value(self) -> float:
        return self._raw / (1 - (1 - self._alpha) ** self.count) if self.count else math.nan

    @property
    def ready(self) -> bool:
        return self.count >= self.window

    def saved(self) -> list[float]:
        """What :meth:`restore` takes back (a checkpoint's)."""
        return [self._raw, self.count]

    def restore(self, saved: list[float]) -> None:
        self._raw, self.count = float(saved[0]), int(saved[1])


class Stop(Exception):
    """A reason to stop the job (raised by a worker, or requested by the monitor)."""

    def __init__(self, status: str, reason: str, error: BaseException | None = None):
        super().__init__(reason)
        self.status, self.reason, self.error = status, reason, error


class InputCount:
    """Where the job's input is since it was last opened, in batches of the round-robin order (the state's
    lock held). Synchronous workers read side by side: ``read`` counts their batches, and ``ahead`` the
    batches a worker's input passed over (:meth:`TrainingState.pass_over`). Asynchronous workers count the
    steps each started (``started``; each reads the next batch of its shard). While a switch opens the new
    input (``opening``): the steps each old worker may still start (``allowance``; 0 for a switch that pauses
    them) and those it started (``spent``). ``counted_generation``: the setting whose steps a switch counted.
    """

    def __init__(self):
        self.counted_generation = -1
        self.restart()

    def restart(self, allowance: int = 0, opening: bool = False) -> None:
        self.read, self.ahead, self.started, self.spent = 0, {}, {}, {}
        self.allowance, self.opening = allowance, opening

    def batches(self, sync: bool, workers: int, allowance: int = 0) -> int:
        """The batches read, the furthest worker's included (see :meth:`TrainingState.batches_read`)."""
        if sync:
            return self.read + workers * max(self.ahead.values(), default=0)
        return workers * (max(self.started.values(), default=0) + allowance)

    def start(self, rank: int) -> int | None:
        """Counts an asynchronous step of worker ``rank``: its batches since the input opened (None in a switch)."""
        counts = self.spent if self.opening else self.started
        counts[rank] = counts.get(rank, 0) + 1
        return None if self.opening else counts[rank]


class TrainingState:
    """Steps, losses, segments and the workers' steps of one job; the one owner of the driver's lock.

    The workers' steps are published as a whole (:meth:`publish`). Each
    worker takes each iteration on the steps published last, so a switch
    reaches it at its next iteration boundary: a step already running
    finishes on the old graphs ("late"). The *generation* numbers the
    settings the job ran, the *version* every change of the steps (a
    transition's end too); ``on`` maps each running worker to the version of
    the step it takes.
    """

    def __init__(self, job, recorder: Recorder, setting: dict[str, Any], *, sync: bool, max_steps: int | None,
                 patience: int | None):
        self.job, self.recorder, self.sync = job, recorder, sync
        # Wall times (the recorder's clock), and a monotonic one for segment durations: the simulator's
        # clock for both in a simulated job.
        self.clock = recorder.clock
        self.timer = time.monotonic if recorder.clock is time.time else recorder.clock
        self.max_steps, self.patience = max_steps, patience
        self.lock = threading.Lock()
        # Held by the synchronous loop through each iteration (steps, apply, record): a checkpoint read under
        # it has the parameters of exactly the step it records. A thread given up on keeps the old one.
        self.step_gate = threading.Lock()
        self.stopped = threading.Event()
        self.stop: Stop | None = None
        self.failure: Stop | None = None  # a worker's TensorFlow error, until the monitor judges it (fail)
        # Wakes the monitor loop: a stop, a decision made, or the segment's iterations all in.
        self.wake = threading.Event()
        self.setting = setting
        self.phase = "fixed"
        self.step = 0
        self.smoothed = SmoothedLoss(job.smoothing_window)
        self.first_iteration_at: float | None = None
        self._best_loss, self._best_step = math.inf, 0  # the patience rule's best smoothed loss, and its step
        # Each worker's training step, a callable made on its session (sync: and the chief's apply).
        self.steps: list = []
        self.apply = None
        self.generation = 0
        self.version = 0
        self.on: dict[int, int] = {}
        self._stepped_in_generation = True  # a step has completed on the current setting's graphs
        self._late_as: tuple[str, int] | None = None  # the previous setting's id and segment, for late steps
        # Segments: the current one's points (step, loss, wall time), and every earlier one's.
        self.segment = 0
        self.points = Columns(3)
        self.history = Columns(3)
        self._loss_before = math.nan
        self.segment_started = 0.0
        self.warmup = 0
        self.goal: int | None = None  # iterations that complete the segment (its duration aside)
        # Sync mode: the step after which the workers hold, for a scheduled switch at exactly that step.
        self.hold_at: int | None = None
        # A switch's first iterations on the new setting, to time it; and iterations per round of its workers.
        self.switch_points: list[tuple[int, float, float]] = []
        self.switch_workers = 1
        # Where the input is; a worker whose allowance in a switch is spent waits for the publish.
        self.input = InputCount()
        self._published = threading.Condition(self.lock)

    @property
    def setting(self) -> dict[str, Any]:
        return self._setting

    @setting.setter
    def setting(self, setting: dict[str, Any]) -> None:
        # Its id is kept with it: every iteration records it, under the lock.
        self._setting, self.setting_id = dict(setting), setting_key(setting)

    # -- the workers' side ---------------------------------------------------

    def step_for(self, rank: int, gone: Callable[[], Any]):
        """Worker ``rank``'s (step, generation, batches it started since its input opened: this one too, None in
        a switch); None when the setting has no such worker (then ``gone`` is called, under the lock)."""
        with self.lock:
            count = self.input
            while count.opening and count.spent.get(rank, 0) >= count.allowance and not self.stopped.is_set():
                self._published.wait(0.05)  # this worker's allowance is spent: its next batch is the new input's
            if rank >= len(self.steps):
                gone()
                return None
            self.on[rank] = self.version
            return self.steps[rank], self.generation, count.start(rank)

    def sync_steps(self):
        """Every worker's step, the chief's apply and their generation, for one synchronous iteration; None
        once the job has run the step it holds at (:attr:`hold_at`)."""
        with self.lock:
            if self.held():
                return None
            self.on[0] = self.version
            return self.steps, self.apply, self.generation

    def pass_over(self, rank: int, generation: int) -> int | None:
        """Synchronous worker ``rank`` lost the batch its step of ``generation`` read: the batches it started
        since its input opened, that one too; from now on it reads a batch ahead of the others. None (nothing
        counted) while a switch opens the input, or once ``generation`` is not the job's setting."""
        with self.lock:
            if self.input.opening or generation != self.generation:
                return None
            ahead = self.input.ahead.get(rank, 0)
            self.input.ahead[rank] = ahead + 1
            return self.input.read // len(self.steps) + 1 + ahead

    def held(self) -> bool:
        """Whether the job has run the step it holds at (sync mode's scheduled switches)."""
        return self.hold_at is not None and self.step >= self.hold_at

    def off(self, rank: int) -> None:
        """Worker ``rank`` runs no step any more."""
        with self.lock:
            self.on.pop(rank, None)

    def record(self, worker: int | None, exec_time_s: float, loss: float, generation: int) -> None:
        """Counts and records one iteration (a push) of the setting ``generation``; a late one, which ended
        after a live switch, is the old setting's: it is recorded as such and not timed in a segment.

        Raises :class:`Stop` when the job converged, reached a limit, stopped
        improving or diverged.
        """
        with self.lock:
            if self.stopped.is_set():
                return  # an iteration that finished after the stop is not counted
            if not math.isfinite(loss):
                message = f"the loss became {loss} at step {self.step + 1}: training diverged"
                raise Stop("failed", message, TfOnlineError(message))
            self.step += 1
            now = self.clock()
            if self.first_iteration_at is None:
                self.first_iteration_at = now
            smoothed = self.smoothed.add(loss)
            late = generation != self.generation
            if self.sync and not (self.input.opening or late and generation == self.input.counted_generation):
                self.input.read += len(self.steps)  # (asynchronous workers count the steps they start: step_for)
            if late:
                setting_id, segment = self._late_as
            else:
                setting_id, segment = self.setting_id, self.segment
                self._stepped_in_generation = True
                self.points.append(self.step, loss, now)
                if len(self.switch_points) < 4 * self.switch_workers + 1:  # see Switcher.record_cost
                    self.switch_points.append((self.step, loss, now))
                if (self.goal is not None and len(self.points) >= self.goal) or self.held():
                    self.wake.set()
            self.recorder.iteration(step=self.step, worker=worker, setting_id=setting_id, segment=segment,
                                    exec_time_s=exec_time_s, loss=loss, smoothed_loss=smoothed, wall_time=now)
            self._check_stop(smoothed)

    def _check_stop(self, smoothed: float) -> None:
        target = self.job.target_loss
        if self.smoothed.ready and smoothed <= target:
            raise Stop("converged", f"target_loss {target:g} reached (smoothed loss {smoothed:.4g})")
        if self.max_steps is not None and self.step >= self.max_steps:
            raise Stop("stopped", f"max_steps ({self.max_steps}) reached")
        if self.patience is None or not self.smoothed.ready:
            return
        if math.isinf(self._best_loss) or smoothed < self._best_loss - PATIENCE_MIN_IMPROVEMENT * abs(self._best_loss):
            self._best_loss, self._best_step = smoothed, self.step
        elif self.step - self._best_step >= self.patience:
            raise Stop("stopped", f"the loss stopped improving: smoothed loss {smoothed:.4g}, best "
                                  f"{self._best_loss:.4g} at step {self._best_step}, none "
                                  f"{PATIENCE_MIN_IMPROVEMENT:.1%} better in {self.patience} iterations (patience); "
                                  f"target_loss {target:g} not reached")

    def request_stop(self, stop: Stop) -> None:
        """The job stops: the first reason given is kept."""
        with self.lock:
            if self.stop is None:
                self.stop = stop
        self.stopped.set()
        self.wake.set()

    def fail(self, failure: Stop) -> None:
        """A worker's step failed: the monitor judges whether a node was lost (the job goes on without it) or
        the job stops with ``failure``; the first one is kept."""
        with self.lock:
            if self.failure is None:
                self.failure = failure
        self.wake.set()

    def take_failure(self) -> Stop | None:
        """The failure reported since the last call, if any."""
        with self.lock:
            failure, self.failure = self.failure, None
            return failure

    # -- switches ------------------------------------------------------------

    def publish(self, new: dict[str, Any], steps: list, apply, observe: bool,
                then: Callable[[], Any], unless: threading.Event | None = None) -> SegmentRun | None:
        """Makes ``new`` the job's setting, with the workers' ``steps``; returns the old segment's run for the
        tuner (when ``observe`` and it has points).

        At once, under the lock: the old setting's segment ends and the new one's starts, and every worker
        takes its next step on ``steps``. A step already running finishes on the old graphs and is counted
        for the old setting. ``then`` runs under the lock after it (it starts the threads of new workers).
        Once ``unless`` is set (a switch given up on), nothing is published.
        """
        with self.lock:
            if unless is not None and unless.is_set():
                return None
            observed = self.segment_run() if len(self.points) and observe else None
            ended = self._end_segment()
            self._late_as = (self.setting_id, self.segment)
            if self.input.opening:  # the switch opened the input again: its count starts anew
                # The old workers' steps while it opened may have read from it (the same shared iterators,
                # when the worker count stays). They count against it: at worst their batches are passed
                # over by a later switch, never read again.
                self.input.started, self.input.spent = self.input.spent, {}
            started = self._take(new, steps, apply, then)
        self.recorder.segment_end(*ended)
        self.recorder.segment_start(*started)
        return observed

    def go_back(self, saved: dict[str, Any] | None, new: dict[str, Any], steps: list, apply,
                then: Callable[[], Any]) -> None:
        """The job goes back to a checkpoint's state ``saved`` (:meth:`saved`; None: the job's start) and on
        from there on ``new``, with ``steps`` (their input opened anew): a lost ps node's variables came back
        from that checkpoint. What it trained after is lost; the segment under way was ended at the
        checkpoint (or removed) by the repository's rewind, and a new one starts."""
        with self.lock:
            self._restore(saved or {"step": 0, "smoothed": [0.0, 0], "best": [math.inf, 0]})
            self.history.cut_after(self.step)
            self.points.clear()
            if not len(self.history):  # the next segment's number is still a new one
                self.segment += 1
            self.input.restart()
            self._late_as = (self.setting_id, self.segment)
            started = self._take(new, steps, apply, then)
        self.recorder.segment_start(*started)

    def _take(self, new: dict[str, Any], steps: list, apply, then: Callable[[], Any]) -> tuple:
        """The workers take ``new``'s ``steps`` from their next iteration, in a new segment (the caller holds
        the lock); returns what :meth:`Recorder.segment_start` records."""
        self.setting = new
        self.steps, self.apply = steps, apply
        self.generation += 1
        self.version += 1
        self._stepped_in_generation = False
        self.switch_points = []
        self.switch_workers = 1 if self.sync else len(steps)
        self.input.opening = False
        self._published.notify_all()
        self.warmup = len(steps)
        started = self._start_segment()
        self.goal = None
        then()
        return started

    def swap_steps(self, steps: list, apply) -> None:
        """New steps for the same setting (a transition's end): each worker takes its next step on them."""
        with self.lock:
            self.steps, self.apply = steps, apply
            self.version += 1

    def settled(self, stepped: bool = False) -> bool:
        """Whether every running worker takes its steps on the steps published last (no step runs on older
        graphs); with ``stepped``, and one has completed on the current setting's graphs."""
        with self.lock:
            return all(v == self.version for v in self.on.values()) and (self._stepped_in_generation or not stepped)

    def batches_read(self, allowance: int = 0) -> int:
        """How far the input moved since it was last opened, in batches of the round-robin order; the input
        is being opened again, after them.

        Synchronous workers read side by side: the batches read, and past
        the batches a worker's input passed over (:meth:`pass_over`). Asynchronous
        ones do not: with ``n`` workers, worker ``r``'s ``k``-th batch is
        batch ``r + n k``, and a fast worker reads far ahead of a slow one.
        So the input moves past the furthest worker's batches, ``n`` times
        the most steps a worker started (a step in flight counts), and the
        slower workers' batches short of it are passed over, never read.

        A live switch's old workers train on while the new input opens: each
        may start ``allowance`` more steps, and the input moves past those
        too, so the new shards do not read their batches again. A worker
        that would start one more waits for the new setting (README, "Online
        reconfiguration").
        """
        with self.lock:
            read = self.input.batches(self.sync, len(self.steps), allowance)
            self.input.restart(allowance, opening=True)
            self.input.counted_generation = self.generation
        return read

    def switch_origin(self) -> tuple[int, float, float | None]:
        """Where a switch's cost is counted from: the last step, its wall time, the old setting's pace."""
        with self.lock:
            _, _, walls = self.points.columns()
            return (self.step, walls[-1] if walls.size else self.clock(),
                    per_iteration_time(walls, min(self.warmup, max(walls.size - 3, 0))))

    def first_points(self) -> tuple[int, list]:
        """The current setting's workers per round, and its first iterations (to time the last switch)."""
        with self.lock:
            return self.switch_workers, list(self.switch_points)

    # -- segments ------------------------------------------------------------

    def begin(self) -> None:
        """The job's first segment."""
        with self.lock:
            started = self._start_segment()
        self.recorder.segment_start(*started)

    def end(self) -> None:
        """The job's last segment ends."""
        with self.lock:
            ended = self._end_segment()
        self.recorder.segment_end(*ended)

    def hand_over(self) -> tuple[SegmentRun, int]:
        """Ends the segment and starts the next under the same setting; returns the ended one's run and id."""
        with self.lock:
            run = self.segment_run()
            ended = self._end_segment()
            self.warmup = 0
            started = self._start_segment()
            self.goal = None  # until the decision is in
        self.recorder.segment_end(*ended)
        self.recorder.segment_start(*started)
        return run, ended[0]

    def go_on(self, segment_length: int) -> None:
        """A decision to stay: the segment's iterations so far are its warm-up; it is timed from now."""
        with self.lock:
            self.warmup = max(self.warmup, len(self.points))
            self.segment_started = self.timer()
            self.goal = segment_length + self.warmup

    def done(self) -> int:
        with self.lock:
            return len(self.points)

    def segment_run(self) -> SegmentRun:
        """The current segment, as the tuner reads it (the caller holds the lock, or no worker runs)."""
        steps, losses, walls = self.points.columns()
        before = self._loss_before if math.isfinite(self._loss_before) else float(losses[0])
        return SegmentRun(dict(self.setting), steps, losses, walls, before, self.smoothed.value, warmup=self.warmup)

    def _start_segment(self) -> tuple:
        """Starts a segment (the caller holds the lock); returns what :meth:`Recorder.segment_start` records."""
        if len(self.points) or len(self.history):
            self.segment += 1
        self.points.clear()
        self._loss_before = self.smoothed.value if self.smoothed.count else math.nan
        self.segment_started = self.timer()
        return self.segment, self.setting_id, self.phase, self.step + 1

    def _end_segment(self) -> tuple:
        """Ends the segment (the caller holds the lock): its points join the history; returns what
        :meth:`Recorder.segment_end` records."""
        self.history.extend(*self.points.columns())
        first = self.points.row(0)[1] if len(self.points) else None
        return self.segment, self.step, first, None if first is None else self.smoothed.value

    # -- checkpoints ---------------------------------------------------------

    def saved(self) -> dict[str, Any]:
        """What a job resumed from a checkpoint taken now needs of this state (JSON-ready): its step,
        setting, segment, smoothed loss, the patience rule's best, and the batches read since the input
        was last opened (as :meth:`batches_read` counts them, without opening it)."""
        with self.lock:
            read = self.input.batches(self.sync, len(self.steps))
            return {"step": self.step, "setting_id": self.setting_id, "segment": self.segment,
                    "smoothed": self.smoothed.saved(), "best": [self._best_loss, self._best_step], "read": read,
                    "first_iteration_at": self.first_iteration_at}

    def resume(self, saved: dict[str, Any], segment: int) -> None:
        """Continues from ``saved`` (:meth:`saved` at a checkpoint); the first segment is numbered ``segment``."""
        with self.lock:
            self._restore(saved)
            self.first_iteration_at = saved["first_iteration_at"]
            self.segment = segment

    def _restore(self, saved: dict[str, Any]) -> None:
        """The step, smoothed loss and patience rule's best of ``saved`` (the caller holds the lock)."""
        self.step = int(saved["step"])
        self.smoothed.restore(saved["smoothed"])
        self._best_loss, self._best_step = float(saved["best"][0]), int(saved["best"][1])

    # -- what the monitor reads ----------------------------------------------

    def snapshot(self) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...], float, bool]:
        """The segment's columns (step, loss, wall time), the history's, the smoothed loss, whether it's ready."""
        with self.lock:
            return self.points.columns(), self.history.columns(), self.smoothed.value, self.smoothed.ready

    def recent(self, n: int = 50) -> tuple[np.ndarray, int, float | None]:
        """The segment's latest ``n`` wall times, the step and the smoothed loss: for the progress display."""
        with self.lock:
            return self.points.columns(n)[2], self.step, self.final_loss

    @property
    def final_loss(self) -> float | None:
        return self.smoothed.value if self.smoothed.count else None
