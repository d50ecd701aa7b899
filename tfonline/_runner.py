"""Runs one job: cluster, graphs, worker sessions, logging, stopping.

The runner is what ``MLJobFramework.run`` does; it lives apart so that
``import tfonline`` does not import TensorFlow.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import math
import os
import platform
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import tensorflow as tf

from tfonline import _graph
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
from tfonline.job import PATIENCE_MIN_IMPROVEMENT, RunResult
from tfonline.placement import DEFAULT_PARTITION_MIN_BYTES, balanced_placement, partition_count_for, relocate
from tfonline.repository import Repository
from tfonline.setting import (
    THREAD_KNOBS,
    knob_table,
    resolve_setting,
    session_config,
    setting_key,
    short_form,
)
from tfonline.tuner import Tuning
from tfonline.progress import Status, Ticker, make_view
from tfonline.reconfig import Plan, plan
from tfonline.reconfig.cost import switch_cost
from tfonline.reconfig.schedule import Schedule
from tfonline.tuner.manager import Decision, SegmentRun, per_iteration_time
from tfonline.tuner.space import switch_parts

logger = logging.getLogger("tfonline")

JOIN_TIMEOUT_S = 30.0
CLEANUP_TIMEOUT_S = 5.0
ESTIMATE_INTERVAL_S = 1.0
UNAVAILABLE_GRACE_S = 15.0
# A switch that has not finished after this long fails the job (a switch takes seconds at most).
SWITCH_TIMEOUT_S = 120.0
# A training step that TensorFlow aborts is run again, up to this many times
# in a row (see run_retrying_aborts).
ABORTED_RETRIES = 3


@contextlib.contextmanager
def signals_as_interrupts():
    """SIGTERM raises KeyboardInterrupt in the main thread, as SIGINT does.

    So ``kill`` and Ctrl-C both unwind through the runner's ``finally``
    blocks, which stop every node. Outside the main thread (where Python
    cannot install handlers) this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"received signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


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


@dataclass
class _Opened:
    """Graphs of a setting, with their sessions and steps once opened (None until then)."""

    graphs: list
    sessions: list | None = None
    steps: list | None = None
    apply: Any = None


@dataclass
class _Prepared:
    """A switch's next setting, made ready while the workers still trained (see ``Runner._prepare``)."""

    setting: dict[str, Any]
    placement: list[int]
    moves: list  # the variables the new placement moves, created lazily (ODMR)
    steady: _Opened
    transition: _Opened | None  # when variables move: the graphs that create them at their first use


class _Stop(Exception):
    """A worker thread's reason to stop the job."""

    def __init__(self, status: str, reason: str, error: BaseException | None = None):
        super().__init__(reason)
        self.status, self.reason, self.error = status, reason, error


class Runner:
    def __init__(self, job, setting, *, db, mode, cluster, nodes, seed, max_steps, max_seconds, quiet,
                 estimator=None, tuning: Tuning | None = None, reconfig: str = "online", patience: int | None = None):
        self.job = job
        self.reconfig = reconfig
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
        self._sessions: list[tf.compat.v1.Session] = []
        # Each worker's training step, a callable made on its session (sync: and the chief's apply).
        self._steps: list = []
        self._apply = None
        self._prepared: _Prepared | None = None  # the next setting, made ready while the workers still train
        self._transition: _Prepared | None = None  # a switch whose moved variables may not all be created yet
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
        self._retired_sessions: list = []  # a transition's sessions: closed at the next switch or the end
        self._opened_sessions: list = []  # every training session the job opened
        self.session_configs: list[tuple[int, Any]] = []
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
        self._pending_reconfiguration: dict[str, Any] | None = None
        self._tuner: ThreadPoolExecutor | None = None
        self._schedule: Schedule | None = None
        # Wakes the monitor loop: a stop, a decision made, or the segment's iterations all in.
        self._wake = threading.Event()
        self._segment_goal: int | None = None  # iterations that complete the segment (its duration aside)
        self._deciding: Future | None = None  # the tuner's decision on the last segment, while it runs
        # The worker graphs of each (layout, placement) the job has used.
        self._graphs_by_layout: dict[tuple[_graph.Layout, tuple[int, ...]], list[_graph.WorkerGraph]] = {}
        self._checkpoint_dir: str | None = None  # reconfig="checkpoint": where the job's checkpoints go
        # Where the job's input is, in batches of the round-robin order: where the
        # shards opened last started, plus what they read (updated at each switch).
        self._input_position = 0
        self._read_in_generation = 0  # batches read since the input was last opened
        self._opening = False  # a switch counted the batches read and opens the new input
        self._counted_generation = -1  # the setting whose steps in flight a switch counted as read

    # -- the whole run -------------------------------------------------------

    def run(self) -> RunResult:
        self.started_at = time.time()
        self._t0 = time.monotonic()
        repo = Repository(self.db_path)
        self.repo = repo
        owned: LocalCluster | None = None
        status, reason, error = "failed", "error", None
        self._job_recorded = False
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
                    self._schedule = Schedule(self.space, setting, self.tuning.schedule)
            self.setting = setting
            self.rule = _graph.PartitioningRule(partition_count_for(node_count), DEFAULT_PARTITION_MIN_BYTES)
            self.partitions = _graph.discover_partitions(self.job, self.rule, self.seed)
            self._record_job_start(setting, node_count)
            with signals_as_interrupts():
                try:
                    cluster, owned = self._cluster(setting, node_count)
                    self.cluster = cluster
                    self._record_cluster(cluster)
                    used = range(setting["ps"] + setting["worker"])
                    cluster.set_threads_of({node: _threads(setting) for node in used})
                    self._steps, self._apply = self._open(setting, balanced_placement(self.partitions, setting["ps"]))
                    if self.tuning is not None:
                        self.manager = self._schedule or self.tuning.manager(
                            self.space, setting, self.job, self.repo, self.seed)
                        self.phase = self.manager.phase
                        self._record_phase(self.phase)
                    self._ticker = Ticker(_view(self.quiet))
                    status, reason = self._train()
                except KeyboardInterrupt:
                    status, reason = "interrupted", "interrupted (SIGINT/SIGTERM)"
                    raise
                finally:
                    _each_step(  # every step runs, even when one before it raised
                        self._close_view,  # the last status, and a terminal left as it was
                        lambda: self._take_prepared(None),
                        self._close_sessions,
                        lambda: _close_all(self._opened_sessions),  # prepared, transition, a failed switch's
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
            if self._checkpoint_dir is not None:
                shutil.rmtree(self._checkpoint_dir, ignore_errors=True)
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
        reason = f"tuning stopped at step {self.step}: {type(error).__name__}: {_essence(str(error))}"
        logger.warning("%s; the job goes on, untuned, on its current setting", reason)
        manager, self.manager = self.manager, None
        self._tuning_overhead_s = getattr(manager, "overhead_s", None)
        self._deciding = None  # a decision still running is not taken
        self._segment_goal = None
        self.phase = "untuned"
        with contextlib.suppress(Exception):
            self._take_prepared(None)
        self.repo.insert("decisions", {
            "job_id": self.job_id, "step": self.step, "phase": "untuned", "current_setting_id": self.setting_id,
            "candidate_setting_id": self.setting_id, "loss": self.smoothed.value, "applied": 0, "reason": reason,
            "types": "", "wall_time": time.time(),
        }, replace=True)
        self._record_phase("untuned")

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
            cluster = LocalCluster(node_count, threads=_threads(setting))
            return cluster, cluster
        if isinstance(arg, Cluster):
            return arg, None
        return ExistingCluster(list(arg)), None

    # -- graphs and sessions -------------------------------------------------

    def _graphs_for(self, setting, placement: list[int], lazy_moves: list[_graph.Move] | None = None
                    ) -> list[_graph.WorkerGraph]:
        """The worker graphs of ``setting``'s layout with ``placement``: built once per job (about 0.2 s each).

        With ``lazy_moves``, the transition graphs that create those moved variables at their first use.
        """
        layout = _graph.Layout.from_setting(setting)
        key = (layout, tuple(placement), tuple(m.name for m in lazy_moves or ()))
        if key not in self._graphs_by_layout:
            self._graphs_by_layout[key] = [
                _graph.build_worker_graph(
                    self.job, layout, rank, self.partitions, placement, self.rule, self.container, self.sync,
                    self.seed, saver=self.reconfig == "checkpoint", lazy_moves=lazy_moves,
                )
                for rank in range(len(layout.worker_nodes))
            ]
        return self._graphs_by_layout[key]

    def _open(self, setting, placement: list[int], carry=None, prepared: _Opened | None = None,
              graphs: list[_graph.WorkerGraph] | None = None) -> tuple[list, Any]:
        """Opens sessions on the graphs of ``setting``'s layout with ``placement``, starts their input and
        returns the workers' steps (see :meth:`_make_steps`; the caller publishes them).

        The job's variables are initialised, unless ``carry`` is given: then
        it is called instead, with the sessions open, to bring the variables
        over from the previous setting. Sessions and steps ``prepared`` ahead
        are used as they are; ``graphs`` (a switch's transition graphs)
        replace the layout's own.
        """
        self.layout, self.placement = _graph.Layout.from_setting(setting), placement
        self.graphs = graphs or self._graphs_for(setting, placement)
        self._sessions = prepared.sessions if prepared else [self._session(wg, setting) for wg in self.graphs]
        if carry is None:
            self._sessions[0].run(self.graphs[0].init_op)
        else:
            carry()
        # Each worker skips its share of the batches the job has read: with
        # round-robin sharding (batch b to worker b mod workers) the job reads
        # on from about where it was instead of seeing its first batches again.
        skip = -(-self._input_position // len(self.graphs))
        self._input_position = skip * len(self.graphs)  # where the new shards start: up to n - 1 batches on
        # The input iterators are made in a session without XLA: with
        # auto-clustering on, MakeIterator fails on a remote worker
        # ("Multiple CPU devices"). The iterators have shared names, so the
        # training sessions then read from them.
        no_jit = dict(setting, global_jit_level="OFF")

        def start_input(rank: int) -> None:
            session, wg = self._sessions[rank], self.graphs[rank]
            if setting["global_jit_level"] == "OFF":
                session.run(wg.local_init_op, {wg.skip: skip})
            else:
                with self._session(wg, no_jit) as init_session:
                    init_session.run(wg.local_init_op, {wg.skip: skip})
            if not prepared:
                _until_reachable(lambda: session.run(wg.probe_op))

        # Each worker's input starts on its own node (skipping costs time on a
        # long job): side by side.
        _for_each(start_input, range(len(self.graphs)))
        if prepared:  # their steps are made
            return prepared.steps, prepared.apply
        return self._make_steps(self._sessions, self.graphs)

    def _make_steps(self, sessions, graphs) -> tuple[list, Any]:
        """Each worker's training step as a callable on its session (sync: and the chief's apply).

        A callable costs less per step than ``Session.run`` and is made off
        the critical path when a switch is prepared (about 0.016 s each). It
        does not register the graphs on the nodes: the first call does, which
        is most of a new session's first step (about 0.1 s here).
        """
        steps = [session.make_callable([wg.loss, wg.train_op]) for session, wg in zip(sessions, graphs)]
        return steps, sessions[0].make_callable(graphs[0].apply_op) if self.sync else None

    def _prepare(self, new: dict[str, Any], how: Plan) -> _Prepared | None:
        """Makes what the switch to ``new`` needs ready while the workers still train under the old setting.

        Online techniques only (the baselines pay their full price): the
        new placement, the variables it moves, the new layout's graphs (and
        the transition graphs that create the moved variables at their first
        use), and when no node restarts, the new sessions with their steps.
        At the switch there is then little left: start the input, swap.
        """
        if how.technique in ("restart", "checkpoint", "none"):
            return None
        placement = relocate(self.partitions, self.placement, new["ps"]) if new["ps"] != self.setting["ps"] \
            else self.placement
        steady = self._graphs_for(new, placement)
        restarted = self._restarted_by(new)
        # What lives on a restarting node is read and restored by the driver instead.
        moves = [m for m in _graph.moves_between(self.graphs[0], steady[0]) if _node_of(m.source) not in restarted]
        transition = self._graphs_for(new, placement, moves) if moves else None
        prepared = _Prepared(dict(new), placement, moves, _Opened(steady), _Opened(transition) if moves else None)
        if not restarted:
            for opened in (prepared.steady, prepared.transition):
                if opened is not None:
                    opened.sessions = [self._session(wg, new) for wg in opened.graphs]
                    opened.steps, opened.apply = self._make_steps(opened.sessions, opened.graphs)
        return prepared

    def _prepare_ahead(self, new: dict[str, Any]) -> None:
        """Prepares the switch to ``new`` (in the tuner's thread), unless it is prepared already."""
        if self._prepared is None or self._prepared.setting != new:
            self._take_prepared(None)
            self._prepared = self._prepare(new, plan(self.space.knobs, self.setting, new, self.reconfig))

    def _restarted_by(self, new: dict[str, Any]) -> set[int]:
        """The nodes a switch to ``new`` restarts: those it uses whose thread pools change."""
        return {node for node in range(new["ps"] + new["worker"]) if self.cluster.node_threads(node) != _threads(new)}

    def _take_prepared(self, new: dict[str, Any]) -> _Prepared | None:
        prepared, self._prepared = self._prepared, None
        if prepared is not None and prepared.setting != new:  # prepared for another switch: never used
            _close_all([session for opened in (prepared.steady, prepared.transition) if opened
                        for session in opened.sessions or ()])
            return None
        return prepared

    def _session(self, wg: _graph.WorkerGraph, setting) -> tf.compat.v1.Session:
        nodes = set(_graph.Layout.from_setting(setting).ps_nodes) | {wg.worker_node}
        nodes |= {_node_of(device) for device in wg.old_devices}
        filters = [f"/job:node/task:{n}" for n in sorted(nodes)]
        session = tf.compat.v1.Session(
            self.cluster.target(wg.worker_node), graph=wg.graph,
            config=session_config(setting, filters, tuple(self.tuning.extra_knobs) if self.tuning else ())
        )
        # What TensorFlow's session was given, kept so it can be read back.
        self.session_configs.append((wg.worker_node, session._config))
        self._opened_sessions.append(session)  # every one is closed when the job ends, whatever happened
        return session

    def _close_sessions(self) -> None:
        _close_all(self._sessions + self._retired_sessions)
        self._sessions, self._retired_sessions = [], []

    def _reset_container(self) -> None:
        """Drops this job's variables (every container it used) from nodes that outlive it.

        A reset can stall for good after nodes were restarted during the job
        (NOTES.md), so the nodes are reset side by side under one deadline:
        the worst case costs CLEANUP_TIMEOUT_S once, not once per node.
        """
        containers = [self.container]

        def reset(index: int) -> None:
            tf.compat.v1.Session.reset(self.cluster.target(index), containers)

        _side_by_side([lambda index=index: reset(index) for index in range(self.cluster.node_count)],
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
                            upcoming = getattr(self.manager, "upcoming", None)  # a schedule knows its next setting
                            if upcoming is not None and upcoming() is not None:
                                self._tuner.submit(self._prepare_ahead, upcoming())
                    switch = self._run_segment()
                    if self._pending_reconfiguration is not None:  # the job ends, or the next switch comes, first
                        self._record_reconfiguration_cost(ended=True)
                    if switch is None:
                        self._record_segment_end()
                        break
                    self._switch(switch.candidate, plan(self.space.knobs, self.setting, switch.candidate,
                                                        self.reconfig))
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
                if self._transition is not None and self._settled(stepped=True):
                    self._watched(self._finish_transition, f"the move of {len(self._transition.moves)} variables "
                                                           f"to their new nodes after step {self.step}")
                if self._retired_sessions and self._settled():  # no step runs on them any more
                    retired, self._retired_sessions = self._retired_sessions, []
                    _close_all(retired)
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

    def _live(self, new: dict[str, Any]) -> bool:
        """Whether the switch to ``new`` happens with no global stop: each worker goes on to the new setting
        at its own next iteration boundary, while the switch is made beside it.

        Asynchronous jobs only (a synchronous step is a barrier anyway), with
        the online techniques, and when no node restarts: a restarted node
        stops every step that uses it, and what lived on a restarted ps is
        read and restored by the driver, which needs no step to write it
        meanwhile. Those switches pause the workers, each at its iteration's
        end, and resume them together.
        """
        return (not self.sync and self.reconfig == "online"
                and plan(self.space.knobs, self.setting, new, self.reconfig).technique != "none"
                and not self._restarted_by(new))

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
            ended, values = self._end_segment()
            self._warmup = 0
            row = self._start_segment()
            self._segment_goal = None  # until the decision is in
        self.repo.update("segments", (self.job_id, ended), values)
        self.repo.insert("segments", row)
        upcoming = self._schedule.upcoming() if self._schedule is not None else None
        if upcoming not in (None, self.setting) and not self._live(upcoming):
            # A schedule switches at its step: the workers stop now, and wait for the preparation if it is
            # still running (it started when the segment did).
            self._pause.set()
        self._deciding = self._tuner.submit(self._decide, run, ended)
        self._deciding.add_done_callback(lambda _: self._wake.set())

    def _decide(self, run: SegmentRun, segment: int) -> tuple[Decision, int, str]:
        old_phase = self.manager.phase
        decision = self.manager.on_segment_end(run)
        if decision.switch:
            self._prepare_ahead(decision.candidate)
            if not self._live(decision.candidate):
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
        self._record_triple(triple, segment)
        if ended and decision.switch:
            decision = replace(decision, switch=False, reason="not applied, the job ended first: " + decision.reason)
        self._record_decision(decision)
        if self.manager.phase != old_phase:
            self._record_phase(self.manager.phase)
        self.phase = decision.phase
        if not decision.switch:
            with self._lock:
                self._warmup = max(self._warmup, len(self._segment_points))
                self._segment_started = time.monotonic()
                self._segment_goal = self.manager.segment_length() + self._warmup
            self.repo.update("segments", (self.job_id, self.segment), {"phase": self.phase})
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
        """Carries out a switch, watched (see :meth:`_watched`); the workers are paused, or, for a live
        switch, still training on the old setting until it is published (:meth:`_publish`)."""
        if how.technique in ("restart", "checkpoint"):
            technique = self._reconfigure if how.technique == "restart" else self._checkpoint_restart
        else:
            technique = self._reopen_sessions if how.sessions_only else self._relocate
        with self._lock:  # where the switch's cost is counted from (see _record_reconfiguration_cost)
            walls = [wall for _, _, wall in self._segment_points]
            self._switch_from = (self.step, walls[-1] if walls else time.time(),
                                 per_iteration_time(np.array(walls), min(self._warmup, max(len(walls) - 3, 0))))
        self._observed = None

        def switch() -> None:
            if self._transition is not None:  # the last switch's moved variables: settled first
                while not self._settled():  # a step from before the last switch is still running
                    time.sleep(0.01)
                self._finish_transition()
            technique(new, how)

        self._watched(switch, f"the switch from {short_form(self.setting)} to {short_form(new)} at step {self.step}")

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
                                        f"{_essence(outcome[0].message)}") from outcome[0]
                raise outcome[0]
        except NodeFailedError as e:
            raise NodeFailedError(f"{e}, during {what}; the job stopped rather than train on parameters "
                                  f"the switch may have left half-moved", e.node_index) from None

    def _reopen_sessions(self, new: dict[str, Any], how: Plan) -> None:
        """SSR for session knobs: new sessions with the new ConfigProto on the same graphs.

        The variables stay on the servers (the graphs and the container are
        the same), and each worker's input iterator, which has a shared name
        on its server, reads on where it stopped. Nothing is moved.
        """
        old = self.setting
        started = time.monotonic()
        prepared = self._take_prepared(new)
        self._retire_sessions()
        if prepared is not None and prepared.steady.sessions:
            opened = prepared.steady
            self._sessions, steps, apply = opened.sessions, opened.steps, opened.apply
        else:
            self._sessions = [self._session(wg, new) for wg in self.graphs]
            for session, wg in zip(self._sessions, self.graphs):
                _until_reachable(lambda: session.run(wg.probe_op))
            steps, apply = self._make_steps(self._sessions, self.graphs)
        self._publish(new, steps, apply)
        logger.info("reconfiguration %s -> %s by SSR: sessions reopened in %.2f s", short_form(old), short_form(new),
                    time.monotonic() - started)
        self._pending_reconfiguration = self._reconfiguration_row(old, new, how, 0)

    def _publish(self, new: dict[str, Any], steps: list, apply) -> None:
        """Makes ``new`` the job's setting, with the workers' ``steps``.

        At once, under the lock: the old setting's segment ends and the new
        one's starts, and every worker takes its next step on ``steps`` (a
        live switch starts the threads of new workers; a worker the new
        setting does not have ends at its next iteration boundary). A step
        already running finishes on the old graphs and is counted for the
        old setting. The old segment's points are kept for the tuner.
        """
        self._record_setting(new)
        with self._lock:
            self._observed = self._segment_run() if self._segment_points and self.manager is not None else None
            ended, values = self._end_segment()
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
            row = self._start_segment()
            self._segment_goal = None
            self._start_workers()  # a live switch's new workers; after a pause, all of them
        self.repo.update("segments", (self.job_id, ended), values)
        self.repo.insert("segments", row)

    def _retire_sessions(self) -> None:
        """Sets the workers' sessions aside: closed once no step runs on them (at once when the workers paused)."""
        self._retired_sessions += self._sessions
        self._sessions = []
        if not self._workers:
            self._close_sessions()

    def _count_batches_read(self) -> None:
        """Moves the input position on by the batches read since the input was last opened (before it is
        opened again).

        A live switch counts each running worker's step in flight as read
        too; a step the old setting's workers start while the new input opens
        reads a batch the new shards may read again (README, "Online
        reconfiguration").
        """
        with self._lock:
            self._input_position += self._read_in_generation + (0 if self.sync else len(self._on))
            self._read_in_generation = 0
            self._opening = True
            self._counted_generation = self._generation

    def _reconfiguration_row(self, old, new, how: Plan, moved: int) -> dict[str, Any]:
        return {"job_id": self.job_id, "step": self.step, "from_setting_id": setting_key(old),
                "to_setting_id": setting_key(new), "types": "+".join(how.types), "technique": how.technique,
                "actions": json.dumps(list(how.actions)), "bytes_moved": moved, "from": self._switch_from,
                "parts": sorted(switch_parts(self.space, old, new))}

    def _checkpoint_restart(self, new: dict[str, Any], how: Plan) -> None:
        """The baseline, as existing systems switch: checkpoint, restart every node, rebuild, restore."""
        old = self.setting
        if self._checkpoint_dir is None:
            self._checkpoint_dir = tempfile.mkdtemp(prefix="tfonline-checkpoint-")
        folder = tempfile.mkdtemp(dir=self._checkpoint_dir)  # this switch's checkpoint, and nothing else
        with self.graphs[0].graph.as_default():  # the driver runs eagerly elsewhere; a Saver must see its graph
            path = self.graphs[0].saver.save(self._sessions[0], os.path.join(folder, "model"),
                                             write_meta_graph=False)
        moved = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
        self._close_sessions()
        self._count_batches_read()
        used = new["ps"] + new["worker"]
        threads = {node: _threads(new) if node < used else self.cluster.node_threads(node)
                   for node in range(self.cluster.node_count)}
        if isinstance(self.cluster, LocalCluster):
            self.cluster.restart_nodes(threads)
        else:  # nodes started elsewhere cannot be restarted: drop the job's state on them instead
            self._reset_container()
        self._graphs_by_layout.clear()  # built anew, as a restarted job would
        steps, apply = self._open(new, balanced_placement(self.partitions, new["ps"]))
        with self.graphs[0].graph.as_default():
            self.graphs[0].saver.restore(self._sessions[0], path)
        shutil.rmtree(folder, ignore_errors=True)
        self._publish(new, steps, apply)
        self._pending_reconfiguration = self._reconfiguration_row(old, new, how, moved)

    def _reconfigure(self, new: dict[str, Any], how: Plan) -> None:
        """The restart technique: read every variable, open sessions on the new setting's graphs
        (restarting nodes whose thread pools change), initialise and restore the values.

        The graphs of a layout are built the first time the job uses it and
        reused after (:meth:`_open`); every layout's variables live in the
        job's one container, which is dropped when the job ends. Each worker
        skips its share of the batches the job has read so far, so the job
        reads on instead of seeing its first batches again.
        """
        old = self.setting
        marks = [("start", time.monotonic())]
        values = self._sessions[0].run(self.graphs[0].variables)
        marks.append(("read variables", time.monotonic()))
        moved = int(sum(getattr(v, "nbytes", 0) for v in values.values()))
        self._close_sessions()
        self._count_batches_read()
        marks.append(("closed sessions", time.monotonic()))
        self.cluster.set_threads_of({node: _threads(new) for node in range(new["ps"] + new["worker"])})
        marks.append(("node restarts", time.monotonic()))
        steps, apply = self._open(new, balanced_placement(self.partitions, new["ps"]))
        marks.append(("new graphs and sessions", time.monotonic()))
        self._restore(values)
        marks.append(("restored variables", time.monotonic()))
        # The switch's cost runs from the old setting's last iteration to the new one's first.
        self._publish(new, steps, apply)
        logger.info("reconfiguration %s -> %s: %s", short_form(old), short_form(new), ", ".join(
            f"{name} {b - a:.2f} s" for (_, a), (name, b) in zip(marks, marks[1:])))
        self._pending_reconfiguration = self._reconfiguration_row(old, new, how, moved)

    def _restore(self, values: dict[str, np.ndarray]) -> None:
        """Assigns values read by the driver to the variables of the current graphs."""
        if values:
            chief = self.graphs[0]
            self._sessions[0].run([chief.restore_ops[name] for name in values],
                                  {chief.restore_feeds[name]: value for name, value in values.items()})

    def _relocate(self, new: dict[str, Any], how: Plan) -> None:
        """The online switch when the layout or the thread pools change: ODMR, TDR, node restarts.

        Only what must move moves, and not at the switch. The placement map
        changes as little as keeps the bytes balanced (:func:`relocate`); a
        partition that stays is the same resource on the same node for the
        new graphs. The workers resume on transition graphs, whose first step
        creates each moved variable on its new node from its old location
        (ODMR, see :func:`_graph.build_worker_graph`); once they have, the
        workers go on to the steady-state graphs and the old copies are
        released (:meth:`_finish_transition`). A node whose thread pools
        change restarts, and the variables on it are read before and
        restored after. Each new worker skips its share of the batches read
        so far (TDR, in :meth:`_open`).
        """
        old, old_chief = self.setting, self.graphs[0]
        marks = [("start", time.monotonic())]
        prepared = self._take_prepared(new) or self._prepare(new, how)
        used = range(new["ps"] + new["worker"])
        restarted = self._restarted_by(new)
        on_restarted = {name: v for name, v in old_chief.variables.items() if _node_of(v.device) in restarted}
        values = self._sessions[0].run(on_restarted) if on_restarted else {}
        marks.append((f"read {len(values)} variables", time.monotonic()))
        self._retire_sessions()
        self._count_batches_read()
        self.cluster.set_threads_of({node: _threads(new) for node in used})
        marks.append((f"restarted {len(restarted)} nodes", time.monotonic()))
        first = prepared.transition or prepared.steady

        def carry() -> None:
            marks.append(("sessions", time.monotonic()))
            self._restore(values)
            marks.append(("restored", time.monotonic()))

        steps, apply = self._open(new, prepared.placement, carry, first if first.sessions else None, first.graphs)
        marks.append(("input" + ("" if first.sessions else ", probe and steps"), time.monotonic()))
        if prepared.moves:
            self._transition = prepared
        self._publish(new, steps, apply)
        logger.info("reconfiguration %s -> %s by %s: %s", short_form(old), short_form(new), how.technique, ", ".join(
            f"{name} {b - a:.2f} s" for (_, a), (name, b) in zip(marks, marks[1:])))
        moved = int(sum(v.nbytes for v in values.values())) + sum(m.nbytes for m in prepared.moves)
        self._pending_reconfiguration = self._reconfiguration_row(old, new, how, moved)

    def _finish_transition(self) -> None:
        """After the transition graphs' first step, once no step runs on the old setting's graphs: every
        moved variable lives at its new node.

        Makes sure of it (the ensure op is a no-op when the first step
        created them all), moves the workers to the steady-state graphs,
        which have no conditional (each takes its new step at its next
        iteration), and releases the old copies and the creation locks. A
        step still running on a transition graph finds every variable
        created and never reads an old copy or takes a lock, so releasing
        them now is safe; its session is closed once it has ended.
        """
        prepared, self._transition = self._transition, None
        self._sessions[0].run(self.graphs[0].ensure_op)
        steady = prepared.steady
        if steady.sessions is None:  # nodes restarted at the switch: opened now
            steady.sessions = [self._session(wg, self.setting) for wg in steady.graphs]
            steady.steps, steady.apply = self._make_steps(steady.sessions, steady.graphs)
        self._retired_sessions += self._sessions
        self.graphs, self._sessions = steady.graphs, steady.sessions
        with self._lock:
            self._steps, self._apply = steady.steps, steady.apply
            self._steps_version += 1
        graph, op = _graph.build_release_graph(prepared.moves, self.container)
        nodes = {_node_of(m.source) for m in prepared.moves} | {_node_of(m.destination) for m in prepared.moves}
        nodes.add(self.graphs[0].worker_node)
        config = tf.compat.v1.ConfigProto(device_filters=[f"/job:node/task:{n}" for n in sorted(nodes)])
        with tf.compat.v1.Session(self.cluster.target(self.graphs[0].worker_node), graph=graph,
                                  config=config) as session:
            session.run(op)
        logger.info("ODMR: %d moved variables live at their new nodes; old copies released", len(prepared.moves))

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
        origin, parts = pending.pop("from"), pending.pop("parts")
        cost = during = None  # the job ended before the new setting's first iteration: no cost measured
        if points:
            cost, during = switch_cost(points, n, *origin)
            if self.manager is not None:
                with self._tuner_faults():
                    self.manager.record_cost(parts, cost)
        self.repo.insert("reconfigurations", dict(pending, cost_s=cost, iterations_during=during,
                                                  wall_time=time.time()), replace=True)

    def _guard(self, loop, *args) -> None:
        try:
            loop(*args)
        except tf.errors.OutOfRangeError:
            message = self._exhausted_message()
            self._request_stop(_Stop("data_exhausted", message, DatasetExhaustedError(message)))
        except tf.errors.OpError as e:
            message = f"TensorFlow failed at step {self.step}: {type(e).__name__}: {_essence(e.message)}"
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
            self.repo.insert("iterations", {
                "job_id": self.job_id, "step": self.step, "worker": worker, "setting_id": setting_id,
                "segment": segment, "exec_time_s": exec_time_s, "loss": loss, "smoothed_loss": smoothed,
                "wall_time": now,
            })
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
        if points[-1][0] - self._last_estimate_step < 3 * len(self.graphs):
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
            reason = f"the estimator {self.estimator.name!r} failed: {type(e).__name__}: {_essence(str(e))}"
            logger.warning("%s; the job goes on without an ETA", reason)
            self.last_estimate = (None, None, reason)
            return
        per_iteration_s = (walls[-1] - walls[0]) / (steps[-1] - steps[0])
        remaining_s = None if remaining is None else remaining * per_iteration_s
        self.last_estimate = (remaining, remaining_s, None if remaining is not None else self.estimator.reason)
        self.repo.insert("estimates", {
            "job_id": self.job_id, "step": points[-1][0], "estimator": self.estimator.name, "loss": current,
            "remaining_iterations": remaining, "remaining_s": remaining_s, "wall_time": time.time(),
        }, replace=True)

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
        self._record_setting(setting)
        self.repo.insert("jobs", {
            "id": self.job_id, "name": self.job.name, "script": os.path.abspath(script), "mode": self.mode,
            "status": "running", "target_loss": float(self.job.target_loss), "max_steps": self.max_steps,
            "max_seconds": self.max_seconds, "started_at": self.started_at, "node_count": node_count,
            "knob_space": json.dumps(space), "host": platform.node(), "tf_version": tf.__version__,
            "python": platform.python_version(), "seed": self.seed, "tuned": int(self.tuning is not None and self.tuning.schedule is None),
            "driver_host": platform.node(), "driver_pid": os.getpid(), "heartbeat_at": time.time(),
        })
        self.repo.flush()
        self._job_recorded = True
        self.repo.beat_for(self.job_id)

    def _record_setting(self, setting) -> None:
        self.repo.insert("settings", {"id": setting_key(setting), "knobs": json.dumps(setting, sort_keys=True),
                                      "short": short_form(setting)}, replace=True)

    def _record_phase(self, phase: str) -> None:
        self.repo.insert("phases", {"job_id": self.job_id, "phase": phase, "start_step": self.step + 1,
                                    "wall_time": time.time()}, replace=True)

    def _record_triple(self, triple, segment: int) -> None:
        self.repo.insert("triples", {
            "job_id": self.job_id, "segment": segment, "setting_id": setting_key(triple.setting),
            "loss_before": triple.loss_before, "per_iteration_s": triple.per_iteration_s,
            "remaining_iterations": triple.remaining_iterations, "remaining_s": triple.remaining_s,
            "estimator": self.estimator.name, "reason": triple.reason,
        }, replace=True)

    def _record_decision(self, decision) -> None:
        self._record_setting(decision.candidate)
        self.repo.insert("decisions", {
            "job_id": self.job_id, "step": self.step, "phase": decision.phase,
            "current_setting_id": setting_key(decision.current),
            "candidate_setting_id": setting_key(decision.candidate), "loss": self.smoothed.value,
            "expected_improvement_s": decision.expected_improvement_s,
            "reconfiguration_cost_s": decision.cost_s, "applied": int(decision.switch), "reason": decision.reason,
            "types": "+".join(decision.types), "overhead_s": decision.overhead_s, "wall_time": time.time(),
        }, replace=True)

    def _record_cluster(self, cluster: Cluster) -> None:
        self.repo.update("jobs", self.job_id, {"cluster": json.dumps(cluster.addresses)})

    def _record_segment_start(self) -> None:
        with self._lock:
            row = self._start_segment()
        self.repo.insert("segments", row)

    def _record_segment_end(self) -> None:
        with self._lock:
            segment, values = self._end_segment()
        self.repo.update("segments", (self.job_id, segment), values)

    def _start_segment(self) -> dict[str, Any]:
        """Starts a segment (the caller holds the lock); returns its row."""
        if self._segment_points or self._history_points:
            self.segment += 1
        self._segment_points = []
        self._segment_loss_before = self.smoothed.value if self.smoothed.count else math.nan
        self._segment_started = time.monotonic()
        return {"job_id": self.job_id, "segment": self.segment, "setting_id": self.setting_id, "phase": self.phase,
                "start_step": self.step + 1, "started_at": time.time()}

    def _end_segment(self) -> tuple[int, dict[str, Any]]:
        """Ends the segment (the caller holds the lock): its points join the history; returns its id and values."""
        self._history_points.extend(self._segment_points)
        return self.segment, {
            "end_step": self.step,
            "start_loss": self._segment_points[0][1] if self._segment_points else None,
            "end_loss": self.smoothed.value if self._segment_points else None,  # what the report shows
            "ended_at": time.time(),
        }

    def _record_job_end(self, status: str, reason: str) -> None:
        if not self._job_recorded:
            return
        finished = time.time()
        values = {
            "status": status, "stop_reason": reason, "finished_at": finished,
            "completion_time_s": finished - self.started_at, "iterations": self.step,
            "final_loss": self.smoothed.value if self.smoothed.count else None,
            "first_iteration_at": self.first_iteration_at,
            "tuning_overhead_s": self.manager.overhead_s if self.manager is not None else self._tuning_overhead_s,
        }
        with contextlib.suppress(Exception):
            self.repo.update("jobs", self.job_id, values)
            self.repo.flush()

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


def _each_step(*steps) -> None:
    """Runs every step, even when one before it raised; then raises the first error (later ones are logged)."""
    first = None
    for step in steps:
        try:
            step()
        except BaseException as e:
            if first is None:
                first = e
            else:
                logger.warning("a clean-up step failed as well: %s: %s", type(e).__name__, e)
    if first is not None:
        raise first


def _side_by_side(calls, what: str, why: str = "a node is gone", timeout_s: float = CLEANUP_TIMEOUT_S) -> list[bool]:
    """Runs each call in a daemon thread, all under one deadline (``timeout_s``); errors are ignored.

    Closing a session, or resetting a container, on a cluster with a dead
    node blocks for good: the master keeps retrying the node. Clean-up must
    never hang the driver, so a call still running at the deadline is
    abandoned; side by side, the worst case costs the deadline once, not
    once per call. Returns, for each call, whether it finished.
    """

    def guarded(call):
        with contextlib.suppress(Exception):
            call()

    threads = [threading.Thread(target=guarded, args=(call,), name="tfonline-cleanup", daemon=True)
               for call in calls]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout_s
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    finished = [not thread.is_alive() for thread in threads]
    if not all(finished):
        logger.warning("%s: %d of %d did not finish within %.0f s (%s); abandoned", what,
                       finished.count(False), len(finished), timeout_s, why)
    return finished


def _until_reachable(call, grace_s: float = UNAVAILABLE_GRACE_S) -> None:
    """Runs ``call`` (side-effect free), retrying while TensorFlow says a node is unavailable.

    Right after nodes restart, the other nodes' gRPC channels to them can
    still be in their reconnect back-off, and a step fails with
    UnavailableError although every node serves. A probe through every
    channel a worker uses, retried for up to ``grace_s``, waits that out
    before training.
    """
    deadline = time.monotonic() + grace_s
    while True:
        try:
            call()
            return
        except tf.errors.UnavailableError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _for_each(call, items) -> None:
    """``call(item)`` for every item, side by side in threads; the first error is raised after all end."""
    items = list(items)
    if len(items) == 1:
        call(items[0])
        return
    with ThreadPoolExecutor(len(items), thread_name_prefix="tfonline-each") as pool:
        for future in [pool.submit(call, item) for item in items]:
            future.result()


def _close_all(sessions) -> None:
    """Closes sessions side by side under one deadline (see :func:`_side_by_side`).

    Closing a session of a cluster with a dead node blocks for good. A
    session still open after the deadline loses its C handle, so that its
    ``__del__`` (which closes it too) cannot block whatever thread the
    garbage collector happens to run in.
    """
    sessions = [s for s in sessions if not s._closed]
    finished = _side_by_side([session.close for session in sessions], f"closing {len(sessions)} session(s)")
    for session, done in zip(sessions, finished):
        if not done:
            session._session = None


def run_retrying_aborts(step, retries: int = ABORTED_RETRIES):
    """``step()``, run again when TensorFlow aborts it, up to ``retries`` times in a row.

    An asynchronous step that fails with ``AbortedError`` can simply be run
    again: a push that may or may not have been applied is what
    asynchronous SGD tolerates anyway. ``tf.compat.v1.train.MonitoredSession``
    treats the error as recoverable too. Seen once here: a fixed job (no
    switch, no restart) failed at step 12,471 of 13,930 with an
    ``AbortedError`` from its worker and no message. Synchronous steps are
    not retried: their accumulators may hold a part of the step.
    """
    for attempt in range(retries + 1):
        try:
            return step()
        except tf.errors.AbortedError as e:
            if attempt == retries:
                raise
            logger.warning("a step was aborted (%s: %s); running it again", type(e).__name__, _essence(e.message))


def _essence(message: str) -> str:
    """The line of a TensorFlow error message that says what went wrong."""
    noise = ("Graph execution error", "Detected at node", "File ", "Original stack", "Node:", "From /job", "[[", "=")
    lines = [ln.strip() for ln in message.splitlines() if ln.strip() and not ln.strip().startswith(noise)]
    return lines[0] if lines else message.strip()


def _node_of(device: str) -> int:
    """The node index of a device string such as ``/job:node/task:2/device:CPU:0``."""
    return int(device.split("/task:")[1].split("/")[0])


def _threads(setting: dict[str, Any]) -> NodeThreads:
    return NodeThreads(*(setting[k] for k in THREAD_KNOBS))
