"""The job's graphs and sessions on its cluster: the factory the driver and the switch techniques share.

An :class:`Engine` builds each layout's worker graphs once, opens sessions
with a setting's ``ConfigProto``, starts each worker's input where the job
is, and makes each worker's training step a callable. It holds what the
job trains on now (graphs, sessions, placement) and where its input is.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from typing import Any

import numpy as np
import tensorflow as tf

from tfonline import _graph
from tfonline._calls import close_all, for_each, node_of, threads_of, until_reachable
from tfonline.cluster import Cluster
from tfonline.placement import Partition, recut
from tfonline.setting import session_config

logger = logging.getLogger("tfonline")


class WorkerStep:
    """A worker's training step (``step()``: its loss and train op's values), and ``reopen(started)``: its
    input iterator started again after the ``started`` batches the worker took since the input was opened.

    TensorFlow kills a tf.data iterator whose ``GetNext`` is cancelled while its ``map`` runs: every later
    call fails with "Iterator was cancelled" (NOTES.md, thirty-sixth session). An aborted step can do that
    (``run_retrying_aborts``); the worker then opens its input again (:class:`tfonline._workers.Workers`).
    """

    __slots__ = ("step", "reopen")

    def __init__(self, step, reopen):
        self.step, self.reopen = step, reopen

    def __call__(self):
        return self.step()


class Engine:
    """Graphs, sessions and input of one job on ``cluster``.

    The large variables are cut into one block per ps node of the layout
    (``rule``, given for the first setting, says which are large; its
    ``partitions`` are that cut's): another ps count is another cut.

    Attributes:
        graphs, sessions: what the workers train on now, one per worker.
        layout, placement: the current setting's nodes and partition map.
        input_position: where the job's input is, in batches of the
            round-robin order: where the shards opened last started, plus
            what they read (moved on by :meth:`advance_input` at a switch).
        session_configs: (node, ConfigProto) of every session opened, as
            TensorFlow was given them.
    """

    def __init__(self, job, cluster: Cluster, partitions, rule, container: str, *, sync: bool, seed: int,
                 saver: bool, extra_knobs: tuple = ()):
        self.job, self.cluster, self.min_bytes = job, cluster, rule.min_bytes
        self._cuts: dict[int, tuple[_graph.PartitioningRule, list[Partition]]] = {
            rule.partition_count: (rule, partitions)}
        self.container, self.sync, self.seed, self.saver, self.extra_knobs = container, sync, seed, saver, extra_knobs
        self.graphs: list[_graph.WorkerGraph] = []
        self.sessions: list[tf.compat.v1.Session] = []
        self.retired: list[tf.compat.v1.Session] = []  # set aside at a switch: closed once no step runs on them
        self.opened: list[tf.compat.v1.Session] = []  # every training session the job opened
        self.session_configs: list[tuple[int, Any]] = []
        self.layout: _graph.Layout | None = None
        self.placement: list[int] = []
        self.input_position = 0
        self._graphs_by_layout: dict[tuple, list[_graph.WorkerGraph]] = {}

    def partitions_for(self, ps_count: int) -> list[Partition]:
        """The partitions of the cut for ``ps_count`` ps nodes (found by building the model once, on no device)."""
        return self._cut(ps_count)[1]

    def rule_for(self, ps_count: int) -> _graph.PartitioningRule:
        """The rule that cuts the large variables into ``ps_count`` blocks."""
        return self._cut(ps_count)[0]

    def _cut(self, ps_count: int) -> tuple[_graph.PartitioningRule, list[Partition]]:
        if ps_count not in self._cuts:
            rule = _graph.PartitioningRule(ps_count, self.min_bytes)
            self._cuts[ps_count] = rule, _graph.discover_partitions(self.job, rule, self.seed)
        return self._cuts[ps_count]

    def graphs_for(self, setting, placement: list[int], lazy_moves: list[_graph.Move] | None = None
                   ) -> list[_graph.WorkerGraph]:
        """The worker graphs of ``setting``'s layout with ``placement``: built once per job (about 0.2 s each).

        With ``lazy_moves``, the transition graphs that create those moved variables at their first use. Those
        are cached by the whole moves, sources included: two switches to one layout and placement move the
        same variables from other places when they come from other cuts (ps 3 -> 2, later ps 1 -> 2), and a
        graph cached by the moves' names pulled the second switch's values from the first one's sources,
        released by then (a tuned CNN job failed on it; had they still existed, it would have trained on
        stale values).
        """
        layout = self.layout_of(setting)
        key = (layout, tuple(placement), tuple(lazy_moves or ()))
        if key not in self._graphs_by_layout:
            rule, partitions = self._cut(setting["ps"])
            self._graphs_by_layout[key] = [
                _graph.build_worker_graph(
                    self.job, layout, rank, partitions, placement, rule, self.container, self.sync,
                    self.seed, saver=self.saver, lazy_moves=lazy_moves,
                )
                for rank in range(len(layout.worker_nodes))
            ]
        return self._graphs_by_layout[key]

    def layout_of(self, setting) -> _graph.Layout:
        """``setting``'s nodes in the cluster's pool (the nodes not lost)."""
        return _graph.Layout.from_setting(setting, self.cluster.pool)

    def nodes_of(self, setting) -> list[int]:
        """The nodes ``setting`` uses: its ps nodes, then its workers."""
        layout = self.layout_of(setting)
        return list(layout.ps_nodes + layout.worker_nodes)

    def forget_graphs(self) -> None:
        """Drops every cached graph: the checkpoint baseline builds them anew, as a restarted job would."""
        self._graphs_by_layout.clear()

    def session(self, wg: _graph.WorkerGraph, setting) -> tf.compat.v1.Session:
        """A session on ``wg`` with ``setting``'s ConfigProto, seeing only the nodes it uses."""
        nodes = set(self.layout_of(setting).ps_nodes) | {wg.worker_node}
        nodes |= {node_of(device) for device in wg.old_devices}
        filters = [f"/job:node/task:{n}" for n in sorted(nodes)]
        session = tf.compat.v1.Session(self.cluster.target(wg.worker_node), graph=wg.graph,
                                       config=session_config(setting, filters, self.extra_knobs))
        # What TensorFlow's session was given, kept so it can be read back.
        self.session_configs.append((wg.worker_node, session._config))
        self.opened.append(session)  # every one is closed when the job ends, whatever happened
        return session

    def make_steps(self, sessions, graphs, setting) -> tuple[list, Any]:
        """Each worker's training step on its session, a :class:`WorkerStep` of ``setting`` (sync: and the
        chief's apply).

        A callable costs less per step than ``Session.run`` and is made off
        the critical path when a switch is prepared (about 0.016 s each). It
        does not register the graphs on the nodes: the first call does, which
        is most of a new session's first step (about 0.1 s here).
        """
        steps = [WorkerStep(session.make_callable([wg.loss, wg.train_op]),
                            functools.partial(self._reopen_input, session, wg, setting, len(graphs)))
                 for session, wg in zip(sessions, graphs)]
        return steps, sessions[0].make_callable(graphs[0].apply_op) if self.sync else None

    def _start_input(self, session, wg: _graph.WorkerGraph, setting, skip: int) -> None:
        """Starts ``wg``'s input iterator at its shard's batch ``skip``. The iterators are made in a session
        without XLA: with auto-clustering on, MakeIterator fails on a remote worker ("Multiple CPU devices").
        They have shared names, so the training sessions then read from them."""
        if setting["global_jit_level"] == "OFF":
            session.run(wg.local_init_op, {wg.skip: skip})
        else:
            with self.session(wg, dict(setting, global_jit_level="OFF")) as init_session:
                init_session.run(wg.local_init_op, {wg.skip: skip})

    def _reopen_input(self, session, wg: _graph.WorkerGraph, setting, workers: int, started: int) -> None:
        """Starts ``wg``'s input again after the ``started`` batches its worker took since the input opened."""
        self._start_input(session, wg, setting, self.input_position // workers + started)

    def open(self, setting, placement: list[int], carry=None, prepared=None, graphs=None) -> tuple[list, Any]:
        """Opens sessions on the graphs of ``setting``'s layout with ``placement``, starts their input and
        returns the workers' steps (see :meth:`make_steps`; the caller publishes them).

        The job's variables are initialised, unless ``carry`` is given: then
        it is called instead, with the sessions open, to bring the variables
        over from the previous setting. Sessions and steps ``prepared`` ahead
        (an object with ``sessions``, ``steps`` and ``apply``) are used as
        they are; ``graphs`` (a switch's transition graphs) replace the
        layout's own.
        """
        self.layout, self.placement = self.layout_of(setting), placement
        self.graphs = graphs or self.graphs_for(setting, placement)
        self.sessions = prepared.sessions if prepared else [self.session(wg, setting) for wg in self.graphs]
        if carry is None:
            self.sessions[0].run(self.graphs[0].init_op)
        else:
            carry()
        # Each worker skips its share of the batches the job has read: with
        # round-robin sharding (batch b to worker b mod workers) the job reads
        # on from about where it was instead of seeing its first batches again.
        skip = -(-self.input_position // len(self.graphs))
        self.input_position = skip * len(self.graphs)  # where the new shards start: up to n - 1 batches on

        def start_input(rank: int) -> None:
            session, wg = self.sessions[rank], self.graphs[rank]
            self._start_input(session, wg, setting, skip)
            if not prepared:
                until_reachable(lambda: session.run(wg.probe_op))

        # Each worker's input starts on its own node (skipping costs time on a
        # long job): side by side.
        for_each(start_input, range(len(self.graphs)))
        if prepared:  # their steps are made
            return prepared.steps, prepared.apply
        return self.make_steps(self.sessions, self.graphs, setting)

    def advance_input(self, batches: int) -> None:
        """Moves the input position on by ``batches`` read since the input was last opened."""
        self.input_position += batches

    def restarted_by(self, new: dict[str, Any]) -> set[int]:
        """The nodes a switch to ``new`` restarts: those it uses whose thread pools change."""
        return {node for node in self.nodes_of(new) if self.cluster.node_threads(node) != threads_of(new)}

    def read(self, variables: dict) -> dict[str, np.ndarray]:
        """The values of ``variables`` (name -> variable of the chief's graph), read by the driver."""
        return self.sessions[0].run(variables) if variables else {}

    def restore(self, values: dict[str, np.ndarray]) -> None:
        """Assigns values read by the driver to the variables of the current graphs (cut as they are cut)."""
        if values:
            chief = self.graphs[0]
            values = recut(values, _graph.variable_shapes(chief))
            self.sessions[0].run([chief.restore_ops[name] for name in values],
                                 {chief.restore_feeds[name]: value for name, value in values.items()})

    def retire_sessions(self, workers_running: bool) -> None:
        """Sets the workers' sessions aside: closed once no step runs on them (at once when none runs)."""
        self.retired += self.sessions
        self.sessions = []
        if not workers_running:
            self.close_sessions()

    def let_go(self, node: int) -> None:
        """Stops waiting on the sessions whose master is node ``node`` (lost): each is closed in a thread of
        its own, never waited for (a close that needs a dead node blocks for good), and forgotten."""
        target = self.cluster.target(node).encode()
        self._let_go(lambda session: session.sess_str == target)

    def let_go_all(self) -> None:
        """:meth:`let_go` for every session the job opened: a lost ps node was in each of them."""
        self._let_go(lambda session: True)

    def _let_go(self, which) -> None:
        for session in filter(which, self.opened):
            threading.Thread(target=_close_quietly, args=(session,), name="tfonline-let-go", daemon=True).start()
        self.sessions, self.retired, self.opened = ([s for s in sessions if not which(s)]
                                                    for sessions in (self.sessions, self.retired, self.opened))

    def close_retired(self) -> None:
        retired, self.retired = self.retired, []
        close_all(retired)

    def close_sessions(self) -> None:
        close_all(self.sessions + self.retired)
        self.sessions, self.retired = [], []

    def close(self) -> None:
        """Closes every session the job opened (prepared, transition, a failed switch's too)."""
        self.close_sessions()
        close_all(self.opened)


def _close_quietly(session) -> None:
    with contextlib.suppress(Exception):  # the node is gone: whatever the close says
        session.close()
