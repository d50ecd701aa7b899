"""Runs one job: cluster, graphs, worker sessions, logging, stopping.

The runner is what ``MLJobFramework.run`` does; it lives apart so that
``import tfonline`` does not import TensorFlow.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import math
import os
import sys
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import tensorflow as tf

from tfonline import _graph
from tfonline._calls import (
    each_step,
    essence,
    run_retrying_aborts,
    side_by_side,
    signals_as_interrupts,
    threads_of,
)
from tfonline.cluster import (
    Cluster,
    ExistingCluster,
    LocalCluster,
    NodeThreads,
    check_addresses,
    default_node_count,
)
from tfonline.exceptions import (
    ConfigurationError,
    DatasetExhaustedError,
    NodeFailedError,
    TfOnlineError,
)
from tfonline.result import PATIENCE_MIN_IMPROVEMENT, RunResult
from tfonline.placement import DEFAULT_PARTITION_MIN_BYTES, balanced_placement, partition_count_for
from tfonline.repository import Repository
from tfonline.setting import (

    knob_table,
    resolve_setting,
    setting_key,
    short_form,
)
from tfonline.tuner import Tuning
from tfonline.progress import Status, Ticker, make_view
from tfonline._recorder import Recorder
from tfonline._sessions import Engine
from tfonline.reconfig import Plan
from tfonline.reconfig.backend import SwitchContext
from tfonline.reconfig.tensorflow import TensorFlowReconfig
from tfonline.reconfig.cost import switch_cost
from tfonline.tuner.schedule import Schedule
from tfonline.timing import per_iteration_time
from tfonline.tuner.manager import Decision, SegmentRun
from tfonline.reconfig import switch_parts

logger = logging.getLogger("tfonline")

JOIN_TIMEOUT_S = 30.0
ESTIMATE_INTERVAL_S = 1.0
# A switch that has not finished after this long fails the job (a switch takes seconds at most).
SWITCH_TIMEOUT_S = 120.0


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


@dataclass(frozen=True)
class _PendingSwitch:
    """A switch made, whose cost is recorded once the new setting's first iterations are in."""

    step: int
    old: dict[str, Any]
    new: dict[str, Any]
    plan: Plan
    bytes_moved: int
    origin: tuple  # (step, wall time, old pace): where the cost is counted from (switch_cost)
    parts: tuple[str, ...]


class _Stop(Exception):
    """A worker thread's reason to stop the job."""

    def __init__(self, status: str, reason: str, error: BaseException | None = None):
        super().__init__(reason)
        self.status, self.reason, self.error = status, reason, error


class Runner:
    def __init__(self, job, setting, *, db, mode, cluster, nodes, seed, max_steps, max_seconds, quiet,
                 estimator=None, tuning: Tuning | None = None, reconfig: str = "online", patience: int | None = None,
                 backend=None):
        self.job = job
        self.reconfig = reconfig
        # Makes the job's Reconfig backend from its Engine (tfonline.reconfig): TensorFlowReconfig unless given.
        self._make_backend = backend or (lambda engine, technique, reset: TensorFlowReconfig(engine, technique, reset))
        self.engine: Engine | None = None
        self.backend = None
        self.requested_setting = setting
        self.db_path = os.fspath(db)
        self.sync = mode == "sync"
        self.mode = mode
        self.cluster_arg = cluster
        self.nodes = nodes
        self.seed = seed
        self.max_steps = max_steps
        self.max_seconds = max_seconds
        self.patience = patience
        self._best_loss = math.inf  # the best smoothed loss, and its step, for the patience rule
        self._best_step = 0
        self.quiet = quiet
        self.job_id = f"{job.name}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
        # Container names allow letters, digits and "." only.
        self.container = "tfonline." + uuid.uuid4().hex
        self._lock = threading.Lock()
        self._stop_event = threading.Event()
        self._stop: _Stop | None = None
        self.step = 0
        self.smoothed = SmoothedLoss(job.smoothing_window)
        self.first_iteration_at: float | None = None
        self.cluster: Cluster | None = None
        self.segment = 0
        self.estimator = estimator
        self._segment_points: list[tuple[int, float, float]] = []  # (step, loss, wall time)
        self._next_estimate_at = 0.0
        self._last_estimate_step = 0
        self.last_estimate: tuple[float | None, float | None, str | None] = (None, None, "no estimate yet")
        # Each worker's training step, a callable made on its session (sync: and the chief's apply).
        self._steps: list = []
        self._apply = None
        # The workers' steps are published as a whole (:meth:`_publish`). Each worker takes each iteration
        # on the steps published last, so a switch reaches it at its next iteration boundary: a step already
        # running finishes on the old graphs ("late"). The generation numbers the settings the job ran, the
        # version every change of the steps (a transition's end too); _on maps each running worker to the
        # version of the step it takes.
        self._generation = 0
        self._steps_version = 0
        self._on: dict[int, int] = {}
        self._workers: dict[int, threading.Thread] = {}
        self._stepped_in_generation = True  # a step has completed on the current setting's graphs
        self._late_as: tuple[str, int] | None = None  # the previous setting's id and segment, for late steps
        self._observed: SegmentRun | None = None  # the old setting's last points, for the tuner after a switch
        self._switch_points: list[tuple[int, float, float]] = []  # the current setting's first, to time a switch
        self._switch_workers = 1  # iterations per round of the current setting's workers (sync: 1)
        self._ticker = Ticker(None)  # the progress display (tfonline.progress), once training starts
        self.tuning = tuning
        self.manager = None
        self.phase = "fixed"
        self._tuning_overhead_s: float | None = None  # the tuner's, once it stopped
        self._estimator_failed = False
        self._pause = threading.Event()
        self._history_points: list[tuple[int, float, float]] = []
        self._segment_loss_before = math.nan
        self._segment_started = 0.0
        self._warmup = 0
        self._pending_reconfiguration: _PendingSwitch | None = None
        self._tuner: ThreadPoolExecutor | None = None
        self._schedule: Schedule | None = None
        # Wakes the monitor loop: a stop, a decision made, or the segment's iterations all in.
        self._wake = threading.Event()
        self._segment_goal: int | None = None  # iterations that complete the segment (its duration aside)
        self._deciding: Future | None = None  # the tuner's decision on the last segment, while it runs
        self._read_in_generation = 0  # batches read since the input was last opened
        self._opening = False  # a switch counted the batches read and opens the new input
        self._counted_generation = -1  # the setting whose steps in flight a switch counted as read

    # -- the whole run -------------------------------------------------------

    def run(self) -> RunResult:
        self.started_at = time.time()
        self._t0 = time.monotonic()
        repo = Repository(self.db_path)
        self.repo = repo
        self.recorder = Recorder(repo, self.job_id)
        owned: LocalCluster | None = None
        status, reason, error = "failed", "error", None
        try:
            for gone in repo.mark_interrupted():
                logger.warning("job %s in %s was marked running, but its driver is gone: now interrupted",
                               gone, self.db_path)
            node_count = self._node_count()
            extra = tuple(self.tuning.extra_knobs) if self.tuning else ()
            setting = resolve_setting(self.requested_setting, node_count, extra_knobs=extra)
            if self.tuning is not None:
                self.space = self.tuning.space(node_count, self._fixed_threads())
                setting = self.space.start(setting)
                if self.tuning.schedule is not None:  # checked before any node starts
                    self._schedule = Schedule(self.space, setting, self.tuning.schedule, self.reconfig)
            self.setting = setting
            self.rule = _graph.PartitioningRule(partition_count_for(node_count), DEFAULT_PARTITION_MIN_BYTES)
            self.partitions = _graph.discover_partitions(self.job, self.rule, self.seed)
            self._record_job_start(setting, node_count)
            with signals_as_interrupts():
                try:
                    cluster, owned = self._cluster(setting, node_count)
                    self.cluster = cluster
                    self.recorder.cluster(cluster.addresses)
                    used = range(setting["ps"] + setting["worker"])
                    cluster.set_threads_of({node: threads_of(setting) for node in used})
                    self.engine = Engine(self.job, cluster, self.partitions, self.rule, self.container,
                                         sync=self.sync, seed=self.seed, saver=self.reconfig == "checkpoint",
                                         extra_knobs=tuple(self.tuning.extra_knobs) if self.tuning else ())
                    self.backend = self._make_backend(self.engine, self.reconfig, self._reset_container)
                    self._steps, self._apply = self.engine.open(
                        setting, balanced_placement(self.partitions, setting["ps"]))
                    if self.tuning is not None:
                        self.manager = self._schedule or self.tuning.manager(
                            self.space, setting, self.job, self.repo, self.seed, self.reconfig)
                        self.phase = self.manager.phase
                        self.recorder.phase(self.phase, self.step + 1)
                    self._ticker = Ticker(_view(self.quiet))
                    status, reason = self._train()
                except KeyboardInterrupt:
                    status, reason = "interrupted", "interrupted (SIGINT/SIGTERM)"
                    raise
                finally:
                    each_step(  # every step runs, even when one before it raised
                        self._close_view,  # the last status, and a terminal left as it was
                        self.backend.close if self.backend is not None else _nothing,
                        self.engine.close if self.engine is not None else _nothing,
                        owned.stop if owned is not None else self._reset_container if self.cluster else _nothing,
                    )
        except _Stop as stop:
            status, reason, error = stop.status, stop.reason, stop.error
        except TfOnlineError as e:
            status, reason, error = "failed", str(e), e
            raise
        except BaseException as e:
            if status != "interrupted":
                status, reason = "failed", f"{type(e).__name__}: {e}"
            raise
        finally:
            self._record_job_end(status, reason)
            repo.close()
        if error is not None:
            raise error
        return self._result(status, reason)

    def _close_view(self) -> None:
        view, self._ticker = self._ticker.view, Ticker(None)
        if view is not None:
            with contextlib.suppress(Exception):  # a display that fails leaves the job alone
                view.close(self._status())

    def _show_progress(self) -> None:
        """Redraws the progress display; a display that fails (a closed stdout) is dropped and the job goes on."""
        try:
            self._ticker.view.update(self._status())
        except Exception as e:
            logger.debug("progress display dropped: %s", e)
            self._ticker = Ticker(None)

    def _stop_tuning(self, error: BaseException) -> None:
        """A failing tuner degrades the job: it goes on, untuned, on its current setting.

        The decision row says why ("tuning stopped at step N: ..."), the phase
        becomes "untuned", and the report shows both.
        """
        reason = f"tuning stopped at step {self.step}: {type(error).__name__}: {essence(str(error))}"
        logger.warning("%s; the job goes on, untuned, on its current setting", reason)
        manager, self.manager = self.manager, None
        self._tuning_overhead_s = getattr(manager, "overhead_s", None)
        self._deciding = None  # a decision still running is not taken
        self._segment_goal = None
        self.phase = "untuned"
        with contextlib.suppress(Exception):
            self.backend.discard()
        self.recorder.tuning_stopped(self.step, self.setting, self.smoothed.value, reason)
        self.recorder.phase("untuned", self.step + 1)

    @contextlib.contextmanager
    def _tuner_faults(self):
        """Turns an error of the tuner (or a schedule) into :meth:`_stop_tuning`; nothing else is caught.

        The workers a decision had paused train on: the monitor loop resumes them (:meth:`_run_segment`).
        """
        try:
            yield
        except (_Stop, TfOnlineError):  # the job's own stops, and a node's failure, stay what they are
            raise
        except Exception as e:
            if self.manager is not None:
                self._stop_tuning(e)
            else:  # tuning has stopped already
                logger.debug("after tuning stopped: %s: %s", type(e).__name__, e)

    def _resume_untuned(self) -> None:
        """Workers that a decision paused before tuning stopped train on, on the current setting."""
        self._join_workers()
        self._pause.clear()
        with self._lock:
            self._start_workers()

    def _node_count(self) -> int:
        arg = self.cluster_arg
        if arg is None:
            count = default_node_count() if self.nodes is None else self.nodes
            if isinstance(count, bool) or not isinstance(count, int) or count < 2:
                raise ConfigurationError(f"nodes must be an integer >= 2 (one ps, one worker), got {count!r}")
            return count
        if self.nodes is not None:
            raise ConfigurationError(f"nodes is for the embedded cluster only, got nodes={self.nodes} with a cluster")
        if isinstance(arg, Cluster):
            return arg.node_count
        if isinstance(arg, (list, tuple)):
            return len(check_addresses(arg))
        raise ConfigurationError(f"cluster must be None, a list of 'host:port' addresses or a Cluster, got {arg!r}")

    def _fixed_threads(self) -> NodeThreads | None:
        """The thread pools of nodes tfonline cannot restart (a given cluster), else None."""
        arg = self.cluster_arg
        if arg is None or isinstance(arg, LocalCluster):
            return None
        if isinstance(arg, Cluster):
            return arg.node_threads(0)
        return NodeThreads.one_per_core()  # what ExistingCluster assumes of nodes it is given

    def _cluster(self, setting, node_count) -> tuple[Cluster, LocalCluster | None]:
        arg = self.cluster_arg
        if arg is None:
            cluster = LocalCluster(node_count, threads=threads_of(setting))
            return cluster, cluster
        if isinstance(arg, Cluster):
            return arg, None
        return ExistingCluster(list(arg)), None

    # -- what the workers train on (tfonline._sessions.Engine) ---------------

    @property
    def graphs(self):
        return self.engine.graphs

    @property
    def layout(self):
        return self.engine.layout

    @property
    def session_configs(self):
        return self.engine.session_configs

    def _reset_container(self) -> None:
        """Drops this job's variables (every container it used) from nodes that outlive it.

        A reset can stall for good after nodes were restarted during the job
        (NOTES.md), so the nodes are reset side by side under one deadline:
        the worst case costs CLEANUP_TIMEOUT_S once, not once per node.
        """
        containers = [self.container]

        def reset(index: int) -> None:
            tf.compat.v1.Session.reset(self.cluster.target(index), containers)

        side_by_side([lambda index=index: reset(index) for index in range(self.cluster.node_count)],
                      f"resetting the job's containers on {self.cluster.node_count} nodes",
                      why="a node is gone, or nodes were restarted during the job")

    # -- training ------------------------------------------------------------

    def _train(self) -> tuple[str, str]:
        with ThreadPoolExecutor(1, thread_name_prefix="tfonline-tuner") as self._tuner:
            self._record_segment_start()
            try:
                while True:
                    if self.manager is not None:
                        with self._tuner_faults():
                            self._segment_goal = self.manager.segment_length() + self._warmup
                            upcoming = self._upcoming()  # a schedule knows its next switch
                            if upcoming is not None:
                                self._tuner.submit(self.backend.prepare, dict(self.setting), *upcoming)
                    switch = self._run_segment()
                    if self._pending_reconfiguration is not None:  # the job ends, or the next switch comes, first
                        self._record_reconfiguration_cost(ended=True)
                    if switch is None:
                        self._record_segment_end()
                        break
                    self._switch(switch.candidate, switch.plan)
                    if self._observed is not None and self.manager is not None:  # trained while it decided
                        with self._tuner_faults():
                            self.manager.observe(self._observed)
            finally:  # workers a switch left running, when it failed
                self._stop_event.set()
                self._join_workers()
        stop = self._stop
        if stop.error is not None and not isinstance(stop.error, NodeFailedError):
            # A worker's TensorFlow error may be the symptom of a dead node
            # whose exit the driver has not seen yet.
            dead = self._dead_node()
            if dead is not None:
                stop = _Stop("failed", str(dead), dead)
        if stop.error is not None:
            raise stop
        return stop.status, stop.reason

    def _run_segment(self) -> Decision | None:
        """Trains under the current setting until the job stops (None) or the tuner decides to switch (its decision).

        When a tuner's segment is complete, the segment is handed to the tuner
        in a background thread and training goes on under the same setting
        (see :meth:`_hand_over_segment`); a decision to stay lets it go on.
        A decision to switch either pauses the workers, or, for a live switch
        (:meth:`_live`), returns with them still training.
        """
        with self._lock:
            self._start_workers()
        switch = None
        try:
            while not self._wait(0.2):
                self.cluster.check_alive()
                elapsed = time.monotonic() - self._t0
                if self.max_seconds is not None and elapsed >= self.max_seconds:
                    self._request_stop(_Stop("stopped", f"max_seconds ({self.max_seconds:g} s) reached"))
                if self._pending_reconfiguration is not None:
                    self._record_reconfiguration_cost()
                if self.backend.in_transition and self._settled(stepped=True):
                    self._watched(self._settle, f"the move of variables to their new nodes after step {self.step}")
                if self.engine.retired and self._settled():  # no step runs on them any more
                    self.engine.close_retired()
                if self.estimator is not None and not self._estimator_failed \
                        and time.monotonic() >= self._next_estimate_at:
                    self._estimate()
                if self._ticker.due():
                    self._show_progress()
                if self.manager is None:
                    if self._pause.is_set() and not self._stop_event.is_set():
                        self._resume_untuned()
                    continue
                if self._deciding is None:
                    with self._tuner_faults():
                        if self._segment_complete():
                            self._hand_over_segment()
                elif self._deciding.done():
                    decision = self._take_decision()
                    if decision is not None and decision.switch:  # _decide paused the workers unless the switch is live
                        switch = decision
                        break
        except NodeFailedError as e:
            self._request_stop(_Stop("failed", str(e), e))
        except BaseException:
            self._deciding = None  # the job fails or is interrupted: the decision no longer matters
            raise
        finally:
            if switch is None:
                self._stop_event.set()
            if self._stop_event.is_set() or self._pause.is_set():
                self._join_workers()
            self._pause.clear()
            if switch is None and self._deciding is not None:
                self._take_decision(ended=True)
        return None if self._stop_event.is_set() else switch

    def _start_workers(self) -> None:
        """Starts a thread for each worker that has none (the caller holds the lock): all at a segment's
        start after a pause, the new ranks at a live switch."""
        if self._stop_event.is_set():
            return
        ranks = range(1) if self.sync else range(len(self._steps))
        for rank in ranks:
            if rank not in self._workers:
                loop, args, name = ((self._sync_loop, (), "tfonline-sync") if self.sync
                                    else (self._async_loop, (rank,), f"tfonline-worker-{rank}"))
                thread = threading.Thread(target=self._guard, args=(loop, *args), name=name, daemon=True)
                self._workers[rank] = thread
                thread.start()

    def _join_workers(self) -> None:
        with self._lock:
            workers = list(self._workers.values())
        for thread in workers:
            thread.join(JOIN_TIMEOUT_S)
        with self._lock:
            self._workers.clear()

    def _live(self, new: dict[str, Any], how: Plan) -> bool:
        """Whether the switch to ``new`` happens with no global stop: each worker goes on to the new setting
        at its own next iteration boundary, while the switch is made beside it.

        Asynchronous jobs only (a synchronous step is a barrier anyway), when
        the backend can make it beside the training (:meth:`Reconfig.live`).
        Other switches pause the workers, each at its iteration's end, and
        resume them together.
        """
        return not self.sync and self.backend.live(self.setting, new, how)

    def _upcoming(self):
        """A schedule's next switch, (setting, plan), when it is not to the current setting; else None."""
        upcoming = self._schedule.upcoming() if self._schedule is not None and self.manager is not None else None
        return upcoming if upcoming is not None and upcoming[0] != self.setting else None

    def _settled(self, stepped: bool = False) -> bool:
        """Whether every running worker takes its steps on the steps published last (no step runs on older
        graphs); with ``stepped``, and one has completed on the current setting's graphs."""
        with self._lock:
            return (all(v == self._steps_version for v in self._on.values())
                    and (self._stepped_in_generation or not stepped))

    def _wait(self, timeout_s: float) -> bool:
        """Waits for a stop, a decision or a segment's last iteration, at most ``timeout_s``; returns whether the job stops."""
        self._wake.wait(timeout_s)
        self._wake.clear()
        return self._stop_event.is_set()

    def _segment_complete(self) -> bool:
        with self._lock:
            done = len(self._segment_points)
        return (done >= self.manager.segment_length() + self._warmup
                and time.monotonic() - self._segment_started >= self.manager.segment_seconds())

    def _segment_run(self) -> SegmentRun:
        steps, losses, walls = (np.array(column, dtype=float) for column in zip(*self._segment_points))
        before = self._segment_loss_before if math.isfinite(self._segment_loss_before) else float(losses[0])
        return SegmentRun(dict(self.setting), steps, losses, walls, before, self.smoothed.value, warmup=self._warmup)

    def _hand_over_segment(self) -> None:
        """Ends the tuner's segment and starts its decision in the background; training goes on.

        The next segment starts at once under the same setting. Its iterations
        until the decision is in are left out of its timing (the tuner shares
        the machine meanwhile), and it is timed for its full length after that.
        """
        with self._lock:
            run = self._segment_run()
            ended = self._end_segment()
            self._warmup = 0
            started = self._start_segment()
            self._segment_goal = None  # until the decision is in
        self.recorder.segment_end(*ended)
        self.recorder.segment_start(*started)
        upcoming = self._upcoming()
        if upcoming is not None and not self._live(*upcoming):
            # A schedule switches at its step: the workers stop now, and wait for the preparation if it is
            # still running (it started when the segment did).
            self._pause.set()
        self._deciding = self._tuner.submit(self._decide, run, ended)
        self._deciding.add_done_callback(lambda _: self._wake.set())

    def _decide(self, run: SegmentRun, segment: int) -> tuple[Decision, int, str]:
        old_phase = self.manager.phase
        decision = self.manager.on_segment_end(run)
        if decision.switch:
            self.backend.prepare(dict(self.setting), decision.candidate, decision.plan)
            if not self._live(decision.candidate, decision.plan):
                self._pause.set()  # the workers stop at their next iteration's end
        return decision, segment, old_phase

    def _take_decision(self, ended: bool = False) -> Decision | None:
        """Records the background decision; a switch is then the caller's to make.

        When the job ``ended`` meanwhile, a decision to switch is recorded as
        not applied, with the reason. None: the tuner failed, and tuning
        stopped (:meth:`_stop_tuning`).
        """
        future, self._deciding = self._deciding, None
        with self._tuner_faults():
            decision, segment, old_phase = future.result()
            triple = self.manager.triples[-1]
        if self.manager is None:
            return None
        self.recorder.triple(triple, segment, self.estimator.name)
        if ended and decision.switch:
            decision = replace(decision, switch=False, reason="not applied, the job ended first: " + decision.reason)
        self.recorder.decision(decision, self.step, self.smoothed.value)
        if self.manager.phase != old_phase:
            self.recorder.phase(self.manager.phase, self.step + 1)
        self.phase = decision.phase
        if not decision.switch:
            with self._lock:
                self._warmup = max(self._warmup, len(self._segment_points))
                self._segment_started = time.monotonic()
                self._segment_goal = self.manager.segment_length() + self._warmup
            self.recorder.segment_phase(self.segment, self.phase)
        return decision

    def _dead_node(self, within_s: float = 2.0) -> NodeFailedError | None:
        """The failure of a node that died, if one has within ``within_s`` (its exit can lag a TensorFlow error)."""
        deadline = time.monotonic() + within_s
        while True:
            try:
                self.cluster.check_alive()
            except NodeFailedError as e:
                return e
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.1)

    def _switch(self, new: dict[str, Any], how: Plan) -> None:
        """Carries out a switch through the backend, watched (see :meth:`_watched`), and publishes it; the
        workers are paused, or, for a live switch, still training on the old setting until it is published."""
        with self._lock:  # where the switch's cost is counted from (see _record_reconfiguration_cost)
            walls = [wall for _, _, wall in self._segment_points]
            origin = (self.step, walls[-1] if walls else time.time(),
                      per_iteration_time(np.array(walls), min(self._warmup, max(len(walls) - 3, 0))))
        self._observed = None
        old = self.setting

        def switch() -> None:
            if self.backend.in_transition:  # the last switch's moved variables: settled first
                while not self._settled():  # a step from before the last switch is still running
                    time.sleep(0.01)
                self._settle()
            context = SwitchContext(workers_running=bool(self._workers), batches_read=self._count_batches_read)
            switched = self.backend.apply(old, new, how, context)
            self._publish(new, switched.steps, switched.apply)
            self._pending_reconfiguration = _PendingSwitch(
                self.step, old, new, how, switched.bytes_moved, origin,
                tuple(sorted(switch_parts(self.space.knobs, old, new))))

        self._watched(switch, f"the switch from {short_form(old)} to {short_form(new)} at step {self.step}")

    def _settle(self) -> None:
        """Ends a switch's transition (:meth:`Reconfig.settle`): the workers go on to the steps it hands over."""
        def swap(steps, apply) -> None:
            with self._lock:
                self._steps, self._apply = steps, apply
                self._steps_version += 1

        self.backend.settle(self.setting, swap)

    def _watched(self, call, what: str) -> None:
        """Runs ``call`` (TensorFlow calls of a switch) in a helper thread while this thread watches the nodes.

        A TensorFlow call that needs a node which died blocks for good (gRPC
        keeps retrying it), and Python cannot interrupt a thread inside one.
        So the call runs beside this thread, which checks the nodes every
        0.2 s: a node that dies mid-switch fails the job with a message naming
        it, instead of hanging the driver or training on parameters the switch
        left half-moved. The stuck helper thread is abandoned (a daemon); the
        job's clean-up is bounded and stops the nodes it started.
        """
        outcome: list[BaseException] = []
        done = threading.Event()

        def carry_out() -> None:
            try:
                call()
            except BaseException as e:  # handed to the watching thread
                outcome.append(e)
            finally:
                done.set()

        threading.Thread(target=carry_out, name="tfonline-switch", daemon=True).start()
        deadline = time.monotonic() + SWITCH_TIMEOUT_S
        try:
            while not done.wait(0.2):
                self.cluster.check_alive()
                if time.monotonic() > deadline:
                    raise TfOnlineError(f"{what} did not finish within {SWITCH_TIMEOUT_S:.0f} s; the job stopped")
            if outcome:
                dead = self._dead_node()
                if dead is not None:
                    raise dead from outcome[0]
                if isinstance(outcome[0], tf.errors.OpError):
                    raise TfOnlineError(f"{what} failed: {type(outcome[0]).__name__}: "
                                        f"{essence(outcome[0].message)}") from outcome[0]
                raise outcome[0]
        except NodeFailedError as e:
            raise NodeFailedError(f"{e}, during {what}; the job stopped rather than train on parameters "
                                  f"the switch may have left half-moved", e.node_index) from None

    def _publish(self, new: dict[str, Any], steps: list, apply) -> None:
        """Makes ``new`` the job's setting, with the workers' ``steps``.

        At once, under the lock: the old setting's segment ends and the new
        one's starts, and every worker takes its next step on ``steps`` (a
        live switch starts the threads of new workers; a worker the new
        setting does not have ends at its next iteration boundary). A step
        already running finishes on the old graphs and is counted for the
        old setting. The old segment's points are kept for the tuner.
        """
        self.recorder.setting(new)
        with self._lock:
            self._observed = self._segment_run() if self._segment_points and self.manager is not None else None
            ended = self._end_segment()
            self._late_as = (self.setting_id, self.segment)
            self.setting = new
            self._steps, self._apply = steps, apply
            self._generation += 1
            self._steps_version += 1
            self._stepped_in_generation = False
            self._switch_points = []
            self._switch_workers = 1 if self.sync else len(steps)
            self._opening = False
            self._warmup = len(steps)
            started = self._start_segment()
            self._segment_goal = None
            self._start_workers()  # a live switch's new workers; after a pause, all of them
        self.recorder.segment_end(*ended)
        self.recorder.segment_start(*started)

    def _count_batches_read(self) -> int:
        """The batches read since the input was last opened (a switch opens it again: :class:`SwitchContext`).

        A live switch counts each running worker's step in flight as read
        too; a step the old setting's workers start while the new input opens
        reads a batch the new shards may read again (README, "Online
        reconfiguration").
        """
        with self._lock:
            read = self._read_in_generation + (0 if self.sync else len(self._on))
            self._read_in_generation = 0
            self._opening = True
            self._counted_generation = self._generation
        return read

    def _record_reconfiguration_cost(self, ended: bool = False) -> None:
        """Records the last switch's cost (:func:`switch_cost`) once the new setting's first iterations
        are in: each worker's first, then up to 3 rounds to time the new pace (fewer when the job ``ended``
        or the next switch comes first)."""
        pending = self._pending_reconfiguration
        with self._lock:
            n = self._switch_workers
            points = list(self._switch_points)
        if len(points) < 4 * n + 1 and not ended:
            return
        self._pending_reconfiguration = None
        cost = during = None  # the job ended before the new setting's first iteration: no cost measured
        if points:
            cost, during = switch_cost(points, n, *pending.origin)
            if self.manager is not None:
                with self._tuner_faults():
                    self.manager.record_cost(list(pending.parts), cost)
        self.recorder.reconfiguration(step=pending.step, old=pending.old, new=pending.new, plan=pending.plan,
                                      bytes_moved=pending.bytes_moved, cost_s=cost, iterations_during=during)

    def _guard(self, loop, *args) -> None:
        try:
            loop(*args)
        except tf.errors.OutOfRangeError:
            message = self._exhausted_message()
            self._request_stop(_Stop("data_exhausted", message, DatasetExhaustedError(message)))
        except tf.errors.OpError as e:
            message = f"TensorFlow failed at step {self.step}: {type(e).__name__}: {essence(e.message)}"
            self._request_stop(_Stop("failed", message, TfOnlineError(message)))
        except _Stop as stop:
            self._request_stop(stop)
        except BaseException as e:  # a bug; fail the job, never hang it
            self._request_stop(_Stop("failed", f"{type(e).__name__}: {e}", e))

    def _exhausted_message(self) -> str:
        return (
            f"the dataset ended at step {self.step} before convergence: smoothed loss "
            f"{self.smoothed.value:.4g} > target_loss {self.job.target_loss:g}; "
            f"repeat it in input_fn (dataset.repeat()) or lower the target"
        )

    def _async_loop(self, rank: int) -> None:
        """Worker ``rank``'s iterations, each on the steps published last: a switch reaches it at its next
        iteration boundary, and a worker the new setting does not have ends there."""
        try:
            while not (self._stop_event.is_set() or self._pause.is_set()):
                with self._lock:
                    if rank >= len(self._steps):
                        self._workers.pop(rank, None)
                        return
                    step, generation = self._steps[rank], self._generation
                    self._on[rank] = self._steps_version
                started = time.perf_counter()
                loss, _ = run_retrying_aborts(step)
                self._record_iteration(rank, time.perf_counter() - started, float(loss), generation)
        finally:
            with self._lock:
                self._on.pop(rank, None)

    def _sync_loop(self) -> None:
        with ThreadPoolExecutor(len(self._steps), thread_name_prefix="tfonline-sync-worker") as pool:
            try:
                while not (self._stop_event.is_set() or self._pause.is_set()):
                    with self._lock:
                        steps, apply, generation = self._steps, self._apply, self._generation
                        self._on[0] = self._steps_version
                    started = time.perf_counter()
                    futures = [pool.submit(step) for step in steps]
                    losses = [float(f.result()[0]) for f in futures]
                    apply()
                    self._record_iteration(None, time.perf_counter() - started, sum(losses) / len(losses),
                                           generation)
            finally:
                with self._lock:
                    self._on.pop(0, None)

    def _request_stop(self, stop: _Stop) -> None:
        with self._lock:
            if self._stop is None:
                self._stop = stop
        self._stop_event.set()
        self._wake.set()

    def _record_iteration(self, worker: int | None, exec_time_s: float, loss: float, generation: int) -> None:
        """Counts and records one iteration (a push) of the setting ``generation``; a late one, which ended
        after a live switch, is the old setting's: it is recorded as such and not timed in a segment."""
        with self._lock:
            if self._stop_event.is_set():
                return  # an iteration that finished after the stop is not counted
            if not math.isfinite(loss):
                message = f"the loss became {loss} at step {self.step + 1}: training diverged"
                raise _Stop("failed", message, TfOnlineError(message))
            self.step += 1
            now = time.time()
            if self.first_iteration_at is None:
                self.first_iteration_at = now
            smoothed = self.smoothed.add(loss)
            late = generation != self._generation
            if not (self._opening or late and generation == self._counted_generation):  # (else counted already)
                self._read_in_generation += len(self._steps) if self.sync else 1
            if late:
                setting_id, segment = self._late_as
            else:
                setting_id, segment = self.setting_id, self.segment
                self._stepped_in_generation = True
                self._segment_points.append((self.step, loss, now))
                if len(self._switch_points) < 4 * self._switch_workers + 1:  # see _record_reconfiguration_cost
                    self._switch_points.append((self.step, loss, now))
                if self._segment_goal is not None and len(self._segment_points) >= self._segment_goal:
                    self._wake.set()
            self.recorder.iteration(step=self.step, worker=worker, setting_id=setting_id, segment=segment,
                                    exec_time_s=exec_time_s, loss=loss, smoothed_loss=smoothed, wall_time=now)
            if self.smoothed.ready and smoothed <= self.job.target_loss:
                raise _Stop("converged", f"target_loss {self.job.target_loss:g} reached (smoothed loss {smoothed:.4g})")
            if self.max_steps is not None and self.step >= self.max_steps:
                raise _Stop("stopped", f"max_steps ({self.max_steps}) reached")
            if self.patience is not None and self.smoothed.ready:
                self._check_patience(smoothed)

    def _check_patience(self, smoothed: float) -> None:
        """Stops the job when the smoothed loss has not improved for ``patience`` iterations (the caller holds
        the lock)."""
        if smoothed < self._best_loss - PATIENCE_MIN_IMPROVEMENT * abs(self._best_loss):
            self._best_loss, self._best_step = smoothed, self.step
        elif self.step - self._best_step >= self.patience:
            raise _Stop("stopped", f"the loss stopped improving: smoothed loss {smoothed:.4g}, best {self._best_loss:.4g}"
                                   f" at step {self._best_step}, none {PATIENCE_MIN_IMPROVEMENT:.1%} better in "
                                   f"{self.patience} iterations (patience); target_loss {self.job.target_loss:g} "
                                   f"not reached")

    def _estimate(self) -> None:
        """Fits the estimator on the current segment and records its estimate.

        Runs in the driver's monitor thread, at most once every
        ``ESTIMATE_INTERVAL_S`` and after at least 3 new iterations per
        worker, so the workers never wait for it.
        """
        self._next_estimate_at = time.monotonic() + ESTIMATE_INTERVAL_S
        with self._lock:
            points = list(self._segment_points)
            history = list(self._history_points)
            current = self.smoothed.value
            ready = self.smoothed.ready
        if not ready or len(points) < 2:
            return
        if points[-1][0] - self._last_estimate_step < 3 * len(self.engine.graphs):
            return
        self._last_estimate_step = points[-1][0]
        steps, losses, walls = zip(*points)
        earlier = tuple(zip(*history))[:2] if history else None
        try:
            self.estimator.fit(steps, losses, start_step=steps[0] - 1, start_loss=losses[0], history=earlier)
            remaining = self.estimator.remaining_iterations(current, self.job.target_loss)
            if remaining is not None:
                remaining = float(remaining)
        except Exception as e:  # a plug-in's bug costs the ETA, not the job
            self._estimator_failed = True
            reason = f"the estimator {self.estimator.name!r} failed: {type(e).__name__}: {essence(str(e))}"
            logger.warning("%s; the job goes on without an ETA", reason)
            self.last_estimate = (None, None, reason)
            return
        per_iteration_s = (walls[-1] - walls[0]) / (steps[-1] - steps[0])
        remaining_s = None if remaining is None else remaining * per_iteration_s
        self.last_estimate = (remaining, remaining_s, None if remaining is not None else self.estimator.reason)
        self.recorder.estimate(step=points[-1][0], estimator=self.estimator.name, loss=current,
                               remaining_iterations=remaining, remaining_s=remaining_s)

    def _status(self) -> Status:
        """What the progress display shows now."""
        with self._lock:
            recent = self._segment_points[-50:]
            step, loss = self.step, self.smoothed.value if self.smoothed.count else None
        pace = (recent[-1][2] - recent[0][2]) / (len(recent) - 1) if len(recent) > 1 else None
        remaining, remaining_s, reason = self.last_estimate
        return Status(self.job.name, step, loss, float(self.job.target_loss), short_form(self.setting), self.phase,
                      pace, remaining_s, remaining, self.estimator.name if self.estimator else None, reason,
                      time.monotonic() - self._t0)

    # -- the repository ------------------------------------------------------

    @property
    def setting_id(self) -> str:
        return setting_key(self.setting)

    def _record_job_start(self, setting, node_count) -> None:
        try:
            script = inspect.getfile(type(self.job))
        except (TypeError, OSError):
            script = sys.argv[0]
        if self.tuning is not None:
            space = self.space.describe()
        else:
            space = {name: {k: v for k, v in asdict(knob).items() if v is not None and k != "apply"}
                     for name, knob in knob_table(node_count).items()}
        self.recorder.setting(setting)
        self.recorder.job_start(
            name=self.job.name, script=script, mode=self.mode, target_loss=float(self.job.target_loss),
            max_steps=self.max_steps, max_seconds=self.max_seconds, started_at=self.started_at,
            node_count=node_count, knob_space=space, tf_version=tf.__version__, seed=self.seed,
            tuned=self.tuning is not None and self.tuning.schedule is None)

    def _record_segment_start(self) -> None:
        with self._lock:
            started = self._start_segment()
        self.recorder.segment_start(*started)

    def _record_segment_end(self) -> None:
        with self._lock:
            ended = self._end_segment()
        self.recorder.segment_end(*ended)

    def _start_segment(self) -> tuple:
        """Starts a segment (the caller holds the lock); returns what :meth:`Recorder.segment_start` records."""
        if self._segment_points or self._history_points:
            self.segment += 1
        self._segment_points = []
        self._segment_loss_before = self.smoothed.value if self.smoothed.count else math.nan
        self._segment_started = time.monotonic()
        return self.segment, self.setting_id, self.phase, self.step + 1

    def _end_segment(self) -> tuple:
        """Ends the segment (the caller holds the lock): its points join the history; returns what
        :meth:`Recorder.segment_end` records."""
        self._history_points.extend(self._segment_points)
        points = self._segment_points
        return (self.segment, self.step, points[0][1] if points else None,
                self.smoothed.value if points else None)

    def _record_job_end(self, status: str, reason: str) -> None:
        self.recorder.job_end(
            status=status, reason=reason, started_at=self.started_at, iterations=self.step,
            final_loss=self.smoothed.value if self.smoothed.count else None,
            first_iteration_at=self.first_iteration_at,
            tuning_overhead_s=self.manager.overhead_s if self.manager is not None else self._tuning_overhead_s)

    def _result(self, status: str, reason: str) -> RunResult:
        first = None if self.first_iteration_at is None else self.first_iteration_at - self.started_at
        return RunResult(
            job_id=self.job_id, status=status, stop_reason=reason, iterations=self.step,
            completion_time_s=time.time() - self.started_at, time_to_first_iteration_s=first,
            final_loss=self.smoothed.value if self.smoothed.count else None, db=self.db_path,
        )


def _nothing() -> None:
    pass


def _view(quiet: bool):
    """The progress display, or None when quiet or when it cannot be made (the job runs without it)."""
    try:
        return make_view(quiet)
    except Exception as e:
        logger.debug("no progress display: %s", e)
        return None
