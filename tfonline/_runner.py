"""Runs one job: its lifecycle, from the repository and the cluster to the result.

The runner is what ``MLJobFramework.run`` does; it lives apart so that
``import tfonline`` does not import TensorFlow. It puts together the
driver's parts, each of which owns its state:

- :class:`~tfonline._recorder.Recorder`: every repository row;
- :class:`~tfonline._sessions.Engine`: graphs, sessions and input on the cluster;
- a :class:`~tfonline.reconfig.Reconfig` backend: how switches are made;
- :class:`~tfonline._state.TrainingState`: steps, losses, segments, the lock;
- :class:`~tfonline._workers.Workers`: the worker threads;
- :class:`~tfonline._monitor.Monitor`: the loop, the tuner's decisions, and
  the :class:`~tfonline._switcher.Switcher` that makes their switches;
- :class:`~tfonline._eta.Progress`: the ETA and the display.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import sys
import time
import uuid
from dataclasses import asdict

import tensorflow as tf

from tfonline import _graph, _resume, tf_config
from tfonline._calls import (CLEANUP_TIMEOUT_S, each_step, reset_node, side_by_side, signals_as_interrupts,
                             threads_of)
from tfonline._eta import Progress, prior_for
from tfonline._evaluation import check_metrics, evaluates
from tfonline._keeper import Keeper
from tfonline._monitor import Monitor
from tfonline._recorder import Recorder
from tfonline._recovery import Recovery
from tfonline._sessions import Engine
from tfonline._state import Stop, TrainingState
from tfonline._switcher import Switcher
from tfonline._workers import Workers
from tfonline.checkpoint import default_model_dir
from tfonline.cluster import Cluster, LocalCluster, NodeThreads, check_addresses, default_node_count
from tfonline.exceptions import ClusterError, ConfigurationError, TfOnlineError
from tfonline.given_cluster import ExistingCluster
from tfonline.placement import DEFAULT_PARTITION_MIN_BYTES, balanced_placement
from tfonline.reconfig.tensorflow import TensorFlowReconfig
from tfonline.repository import Repository
from tfonline.result import RunResult
from tfonline.setting import knob_table, resolve_setting, short_form
from tfonline.signature import Signature, signature
from tfonline._identity import class_spec, own_attributes
from tfonline.tuner import Tuning
from tfonline.tuner.schedule import Schedule

logger = logging.getLogger("tfonline")


def tensorflow_backend(engine: Engine, technique: str, reset_container) -> TensorFlowReconfig:
    """The default backend: the TensorFlow techniques (:mod:`tfonline.reconfig.tensorflow`)."""
    return TensorFlowReconfig(engine, technique, reset_container)


class Runner:
    """One job's run. ``backend(engine, technique, reset_container)`` makes its
    :class:`~tfonline.reconfig.Reconfig` (:func:`tensorflow_backend` unless given)."""

    def __init__(self, job, setting, *, db, mode, cluster, nodes, seed, max_steps, max_seconds, quiet,
                 estimator=None, tuning: Tuning | None = None, reconfig: str = "online", patience: int | None = None,
                 backend=None, model_dir=None, resume: bool = False,
                 checkpoint_every_s: float | None = None, keep_checkpoints: int | None = None,
                 tensorboard=None):
        self.job, self.requested_setting, self.db_path = job, setting, os.fspath(db)
        self.mode, self.sync = mode, mode == "sync"
        if isinstance(cluster, str) and cluster == tf_config.VARIABLE:  # TensorFlow's convention: the environment's
            cluster = tf_config.addresses()
        self.cluster_arg, self.nodes, self.seed, self.quiet = cluster, nodes, seed, quiet
        self.max_steps, self.max_seconds, self.patience = max_steps, max_seconds, patience
        self.estimator, self.tuning, self.reconfig = estimator, tuning, reconfig
        self._make_backend = backend or tensorflow_backend
        self.job_id = f"{job.name}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
        self.model_dir_arg = None if model_dir is None else os.path.abspath(model_dir)
        self.resume, self.checkpoint_every_s, self.keep_checkpoints = resume, checkpoint_every_s, keep_checkpoints
        self.resumed: _resume.ResumePoint | None = None
        self.keeper: Keeper | None = None
        self.tensorboard, self.board = tensorboard, None
        self.signature: Signature | None = None
        # Container names allow letters, digits and "." only.
        self.container = "tfonline." + uuid.uuid4().hex
        self.cluster: Cluster | None = None
        self.claim = None  # a given cluster's hold for this job (tfonline._control.Claim)
        self.engine: Engine | None = None
        self.backend = None
        self.state: TrainingState | None = None
        self.monitor: Monitor | None = None
        self.progress: Progress | None = None
        self.space = None
        self.inheritance = None  # what the tuner starts from (tfonline.tuner.inherit), made before the start setting
        self._schedule: Schedule | None = None

    # -- what the workers trained on (tfonline._sessions.Engine) -------------

    @property
    def graphs(self):
        return self.engine.graphs

    @property
    def layout(self):
        return self.engine.layout

    @property
    def session_configs(self):
        return self.engine.session_configs

    # -- the whole run -------------------------------------------------------

    def run(self) -> RunResult:
        self.started_at, self._t0 = time.time(), time.monotonic()
        repo = Repository(self.db_path)
        try:
            for gone in repo.mark_interrupted():
                logger.warning("job %s in %s was marked running, but its driver is gone: now interrupted",
                               gone, self.db_path)
            self.resumed = _resume.find(repo, self.job.name, self.model_dir_arg) if self.resume else None
        except BaseException:
            repo.close()
            raise
        if self.resumed is not None:  # the same job goes on: its id, start and time trained so far
            self.job_id, self.started_at = self.resumed.job_id, self.resumed.started_at
            self._t0 -= self.resumed.saved["elapsed_s"]
        self.model_dir = self.model_dir_arg or (self.resumed.model_dir if self.resumed is not None
                                                else default_model_dir(self.db_path, self.job_id))
        self.recorder = Recorder(repo, self.job_id)
        self.state = TrainingState(self.job, self.recorder, {}, sync=self.sync, max_steps=self.max_steps,
                                   patience=self.patience)
        status, reason, error = "failed", "error", None
        try:
            node_count, setting = self._setting()
            if self.resumed is not None:
                self.state.resume(self.resumed.saved, self.resumed.next_segment)
            self._record_job_start(setting, node_count)
            with signals_as_interrupts():
                status, reason = self._on_a_cluster(setting, node_count)
        except Stop as stop:
            status, reason, error = stop.status, stop.reason, stop.error
        except TfOnlineError as e:
            status, reason, error = "failed", str(e), e
            raise
        except KeyboardInterrupt:
            status, reason = "interrupted", "interrupted (SIGINT/SIGTERM)"
            raise
        except BaseException as e:
            status, reason = "failed", f"{type(e).__name__}: {e}"
            raise
        finally:
            self._record_job_end(status, reason)
            repo.close()
        if error is not None:
            raise error
        return self._result(status, reason)

    def _setting(self) -> tuple[int, dict]:
        """The node count and the starting setting, checked (with a schedule) before any node starts."""
        node_count = self._node_count()
        serving = self._serving(node_count)
        extra = tuple(self.tuning.extra_knobs) if self.tuning else ()
        requested = self.resumed.setting if self.resumed is not None else self.requested_setting
        cores = self._cores()
        setting = resolve_setting(requested, node_count if requested is not None else serving, cores, extra)
        if setting["ps"] + setting["worker"] > serving:
            raise ConfigurationError(
                f"the setting's ps + worker must be <= the {serving} node(s) serving now (the others join once "
                f"they serve), got ps {setting['ps']} + worker {setting['worker']}")
        unsigned = None  # read first (what the tuner inherits picks the start); said after the job's own checks
        try:
            self.signature = signature(self.job, DEFAULT_PARTITION_MIN_BYTES, self.mode)
        except Exception as e:  # noqa: BLE001 (a helper: the job runs without it)
            unsigned = e
        if self.tuning is not None:
            self.space = self.tuning.space(node_count, self._fixed_threads(), cores)
            if self.tuning.schedule is None:
                self.inheritance = self._inherit()
                if requested is not None:  # the user's, or the resumed job's, setting comes first
                    self.inheritance.start = self.inheritance.start_from = None
                elif self.inheritance.start is not None and _fits(self.inheritance.start, serving):
                    # where the nearest earlier job ended
                    setting = resolve_setting(self.inheritance.start, node_count, cores, extra)
            setting = self.space.start(setting)
            if self.tuning.schedule is not None:
                self._schedule = Schedule(self.space, setting, self.tuning.schedule, self.reconfig)
        self.state.setting = setting
        self.rule = _graph.PartitioningRule(setting["ps"], DEFAULT_PARTITION_MIN_BYTES)  # a block per ps node
        self.partitions = _graph.discover_partitions(self.job, self.rule, self.seed)
        if evaluates(self.job):
            check_metrics(self.job, self.rule, {part.name for part in self.partitions})
        if unsigned is not None:  # the job itself is sound: the signature alone failed
            logger.warning("no workload signature for %s: %s: %s", self.job.name, type(unsigned).__name__, unsigned)
        return node_count, setting

    def _inherit(self):
        """What the tuner starts from (:meth:`tfonline.tuner.Tuning.inherit`); nothing when the repository
        cannot say (a helper: the job is tuned as if alone)."""
        from tfonline.tuner import Inheritance

        try:
            return self.tuning.inherit(self.space, self.job, self.recorder.repo, self.job_id, self.signature)
        except Exception as e:  # noqa: BLE001
            logger.warning("nothing inherited from earlier jobs: %s: %s; the job is tuned as if alone",
                           type(e).__name__, e)
            return Inheritance()

    def _on_a_cluster(self, setting: dict, node_count: int) -> tuple[str, str]:
        """Starts (or joins) the cluster, trains, and stops everything it started, whatever happened."""
        owned: LocalCluster | None = None
        try:
            cluster, owned = self._cluster(setting, node_count)
            # Before anything touches the nodes: a job refused them must not reset them either (a reset closes
            # every session of a node's master, the other job's too).
            self.claim = cluster.claim() if isinstance(cluster, ExistingCluster) else None
            self.cluster = cluster
            self.recorder.cluster(self.cluster.addresses)
            if self.space is not None:
                self.space.nodes_alive = len(self.cluster.pool)
            used = self.cluster.pool[:setting["ps"] + setting["worker"]]
            self.cluster.set_threads_of({node: threads_of(setting) for node in used})
            self.engine = Engine(self.job, self.cluster, self.partitions, self.rule, self.container,
                                 sync=self.sync, seed=self.seed, saver=self.reconfig == "checkpoint",
                                 extra_knobs=tuple(self.tuning.extra_knobs) if self.tuning else ())
            self.backend = self._make_backend(self.engine, self.reconfig, self._reset_container)
            if self.resumed is not None:
                self.engine.input_position = self.resumed.saved["input_position"]
            self.state.steps, self.state.apply = self.engine.open(
                setting, balanced_placement(self.partitions, setting["ps"]))
            if self.resumed is not None:
                self.engine.restore(_resume.cluster_values(self.resumed.checkpoint, _graph.GLOBAL_STEP_NAME))
            self.keeper = Keeper(self.job, self.engine, self.state, self.recorder, self.model_dir, seed=self.seed,
                                 started=self._t0, every_s=self.checkpoint_every_s, keep=self.keep_checkpoints,
                                 resumed=self.resumed is not None)
            if self.resumed is not None:  # what a lost ps node's variables go back to, until the next checkpoint
                self.keeper.latest, self.keeper.latest_saved = self.resumed.checkpoint, self.resumed.saved
            self.board = self._board()
            self.monitor = self._monitor(setting)
            try:
                ended = self.monitor.train()
            except KeyboardInterrupt:  # Ctrl-C or SIGTERM: what was trained is kept, for run(resume=True)
                self._save_interrupted()
                raise
            self._keep_model()
            return ended
        finally:
            each_step(  # every step runs, even when one before it raised
                self.progress.close if self.progress is not None else _nothing,  # the last status shown
                self._close_board,
                self.keeper.close if self.keeper is not None else _nothing,
                self.backend.close if self.backend is not None else _nothing,
                self.engine.close if self.engine is not None else _nothing,
                owned.stop if owned is not None else self._reset_container if self.cluster else _nothing,
                self.claim.close if self.claim is not None else _nothing,  # after the reset: held until then
            )

    def _board(self):
        """The live TensorBoard events' writer, for ``run(tensorboard=DIR)``; None when it cannot be made."""
        if self.tensorboard is None:
            return None
        from tfonline.tensorboard import EventWriter

        try:
            return EventWriter(self.recorder.repo, self.job_id, self.tensorboard)
        except Exception as e:  # noqa: BLE001 (the job trains without its events)
            logger.warning("no TensorBoard events in %s: %s: %s; the job goes on", self.tensorboard,
                           type(e).__name__, e)
            return None

    def _close_board(self) -> None:
        """The job's last events (its last rows committed first), and the event file closed."""
        if self.board is not None:
            with contextlib.suppress(Exception):
                self.recorder.repo.flush()
            self.board.write_safely()
            self.board.close()

    def _save_interrupted(self) -> None:
        """A checkpoint of an interrupted job (its workers stopped, its sessions still open); a second
        interrupt, or an error, leaves it unwritten."""
        try:
            self.keeper.save("interrupted")
        except (Exception, KeyboardInterrupt) as e:  # noqa: BLE001
            logger.warning("the interrupted job's checkpoint was not written: %s", type(e).__name__)

    def _keep_model(self) -> None:
        """The job's final checkpoint and metrics. A failure is logged: the trained job still ends as it did."""
        try:
            self.keeper.save("final")
        except Exception as e:  # noqa: BLE001 (a disk or TensorFlow error: the result says there is none)
            logger.error("the job's checkpoint could not be written to %s: %s", self.model_dir, e)
        try:
            self.keeper.evaluate()
        except Exception as e:  # noqa: BLE001
            logger.error("the job's evaluation failed: %s: %s", type(e).__name__, e)

    def _monitor(self, setting: dict) -> Monitor:
        """The driver's parts, put together."""
        state = self.state
        manager = None
        if self.tuning is not None:
            manager = self._schedule or self.tuning.manager(self.space, setting, self.job, self.recorder.repo,
                                                            self.seed, self.reconfig, self.job_id, self.signature,
                                                            self.inheritance)
            self.recorder.inherited(getattr(manager, "inheritance", None))
            state.phase = manager.phase
            self.recorder.phase(manager.phase, state.step + 1)
        workers = Workers(state)
        switcher = Switcher(state, workers, self.backend, self.cluster, self.recorder,
                            self.space.knobs if self.space is not None else {})
        prior = prior_for(self.recorder.repo, self.job_id, self.job.name, self.job.target_loss,
                          self.estimator.name, self.mode) if self.estimator is not None else None
        self.progress = Progress(self.job, state, self.recorder, self.estimator, lambda: len(self.engine.graphs),
                                 self._t0, prior)
        self.progress.inform(manager)
        self.progress.show(self.quiet)
        knobs = self.space.knobs if self.space is not None else knob_table(self.cluster.node_count, self._cores())
        return Monitor(state, workers, switcher, self.engine, self.recorder, self.progress, manager,
                       estimator_name=self.estimator.name if self.estimator else None,
                       limit_s=self.max_seconds, started=self._t0, keeper=self.keeper, board=self.board,
                       recovery=Recovery(self.engine, self.backend, self.recorder, knobs, self.space, self.keeper,
                                         self.claim))

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
        raise ConfigurationError(f"cluster must be None, a list of 'host:port' addresses, 'TF_CONFIG' or a Cluster, "
                                 f"got {arg!r}")

    def _serving(self, node_count: int) -> int:
        """How many of a given cluster's nodes serve now: the job starts on those, the others join later.

        Given addresses become their :class:`ExistingCluster` here, which
        looks at each node once; with fewer than 2 serving, 2 (the job fails
        when its cluster is made, with its row saying why).
        """
        arg = self.cluster_arg
        if isinstance(arg, (list, tuple)):
            try:
                self.cluster_arg = arg = ExistingCluster(list(arg))
            except ClusterError:
                return 2
        return len(arg.pool) if isinstance(arg, Cluster) else node_count

    def _cores(self) -> int | None:
        """The thread knobs' bound: the cores a given cluster's nodes offer, else this host's (None)."""
        return getattr(self.cluster_arg, "cores", None)

    def _fixed_threads(self) -> NodeThreads | None:
        """The thread pools of nodes tfonline cannot restart (a given cluster that is not restartable), else None."""
        arg = self.cluster_arg
        if arg is None or isinstance(arg, LocalCluster):
            return None
        if isinstance(arg, ExistingCluster) and arg.restartable:  # nodes of `tfonline node`: they restart
            return None
        if isinstance(arg, Cluster):
            return arg.node_threads(arg.pool[0])
        return NodeThreads.one_per_core()  # what ExistingCluster assumes of nodes it is given

    def _cluster(self, setting, node_count) -> tuple[Cluster, LocalCluster | None]:
        arg = self.cluster_arg
        if arg is None:
            cluster = LocalCluster(node_count, threads=threads_of(setting))
            return cluster, cluster
        if isinstance(arg, Cluster):
            return arg, None
        return ExistingCluster(list(arg)), None

    def _reset_container(self) -> None:
        """Drops this job's variables (every container it used) from nodes that outlive it.

        A reset can stall for good after nodes were restarted during the job
        (NOTES.md), so the nodes are reset side by side under one deadline:
        the worst case costs CLEANUP_TIMEOUT_S once, not once per node.
        """
        containers = [self.container]

        # Each node is reset through its own master, for itself alone (reset_node): a lost node is not
        # reset, and no reset waits on it.
        def reset(index: int) -> None:
            reset_node(self.cluster.addresses[index], containers, index, CLEANUP_TIMEOUT_S - 0.5)

        pool = self.cluster.pool
        side_by_side([lambda index=index: reset(index) for index in pool],
                      f"resetting the job's containers on {len(pool)} nodes",
                      why="a node is gone, or nodes were restarted during the job")

    # -- the repository ------------------------------------------------------

    def _record_job_start(self, setting, node_count) -> None:
        if self.resumed is not None:
            self.recorder.setting(setting)
            self.recorder.repo.rewind(self.job_id, self.resumed.step)
            self.recorder.job_resumed(self.resumed)
            logger.info("resuming %s from step %d (%s); %d iterations after it were lost", self.job_id,
                        self.resumed.step, self.resumed.checkpoint, self.resumed.last_step - self.resumed.step)
            if self.requested_setting is not None:
                logger.warning("resuming %s on its checkpoint's setting (%s): the setting given is not used",
                               self.job_id, short_form(setting))
            return
        try:
            script = inspect.getfile(type(self.job))
        except (TypeError, OSError):
            script = sys.argv[0]
        if self.tuning is not None:
            space = self.space.describe()
        else:
            space = {name: {k: v for k, v in asdict(knob).items() if v is not None and k != "apply"}
                     for name, knob in knob_table(node_count, self._cores()).items()}
        self.recorder.setting(setting)
        self.recorder.job_start(
            name=self.job.name, script=script, mode=self.mode, target_loss=float(self.job.target_loss),
            max_steps=self.max_steps, max_seconds=self.max_seconds, started_at=self.started_at,
            node_count=node_count, knob_space=space, tf_version=tf.__version__, seed=self.seed,
            tuned=self.tuning is not None and self.tuning.schedule is None,
            job_class=class_spec(type(self.job)), attributes=own_attributes(self.job))
        self.recorder.model_dir(self.model_dir)
        if self.signature is not None:
            self.recorder.signature(self.signature)

    def _record_job_end(self, status: str, reason: str) -> None:
        state = self.state
        self.recorder.job_end(
            status=status, reason=reason, started_at=self.started_at, iterations=state.step,
            final_loss=state.final_loss, first_iteration_at=state.first_iteration_at,
            tuning_overhead_s=self.monitor.overhead_s if self.monitor is not None else None)

    def _result(self, status: str, reason: str) -> RunResult:
        state = self.state
        first = None if state.first_iteration_at is None else state.first_iteration_at - self.started_at
        return RunResult(
            job_id=self.job_id, status=status, stop_reason=reason, iterations=state.step,
            completion_time_s=time.time() - self.started_at, time_to_first_iteration_s=first,
            final_loss=state.final_loss, db=self.db_path,
            checkpoint=self.keeper.latest if self.keeper is not None else None,
            metrics=dict(self.keeper.metrics or {}) if self.keeper is not None else {},
        )


def _nothing() -> None:
    pass


def _fits(setting: dict, nodes: int) -> bool:
    """Whether ``setting``'s ps and workers fit on ``nodes`` nodes."""
    return setting.get("ps", 1) + setting.get("worker", 1) <= nodes
