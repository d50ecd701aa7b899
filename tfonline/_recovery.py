"""A node lost mid-job: the job goes on without it where it can.

A node that died, or that stopped answering, is taken out of the cluster's
pool (:meth:`tfonline.cluster.Cluster.lose`) for the rest of the job, and the
tuner proposes no setting that needs more nodes than are left. What else
happens depends on what the node was under the current setting:

- **idle** (no ps, no worker): nothing more; the job trains on.
- **a worker**, with another one left: the job switches to the same setting
  with one worker fewer, by TDR over the workers left (the ps nodes and
  everything on them stay). Nothing trained is lost but the dead worker's
  step in flight; a synchronous job discards the whole step in flight (its
  survivors' gradients wait in accumulators for an apply that never came).
- **a ps node, or the last worker**: the job stops, failed, as before; it can
  be resumed from its latest checkpoint (``run(resume=True)``).

Each loss is a ``node_losses`` row: the node, its role, the step, the cause
and what the job did.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from tfonline import _graph
from tfonline._recorder import Recorder
from tfonline._sessions import Engine
from tfonline.exceptions import NodeFailedError
from tfonline.reconfig import Reconfig
from tfonline.reconfig.plan import Plan, plan

logger = logging.getLogger("tfonline")


@dataclass(frozen=True)
class Lost:
    """A node the job goes on without."""

    node: int
    role: str  # "worker" or "idle"
    rank: int | None  # a worker's rank under the setting it was lost from
    cause: str  # what the driver saw (the NodeFailedError's message)
    old: dict[str, Any]
    new: dict[str, Any] | None  # the setting the job switches to (None: it stays)
    plan: Plan | None

    @property
    def action(self) -> str:
        if self.new is None:
            return "it was not in use; the job went on"
        return f"the job went on as ps{self.new['ps']} w{self.new['worker']}: TDR over the worker(s) left"


class Recovery:
    """Judges a lost node and takes it out of the job (see the module's description).

    ``space`` is the tuner's :class:`~tfonline.tuner.space.KnobSpace` (None
    untuned); ``knobs`` the knob table the switches are planned with.
    """

    def __init__(self, engine: Engine, backend: Reconfig, recorder: Recorder, knobs, space=None):
        self.engine, self.backend, self.recorder, self.knobs, self.space = engine, backend, recorder, knobs, space

    def judge(self, error: NodeFailedError, setting: dict[str, Any]) -> Lost:
        """What the job does without the node ``error`` names; raises ``error`` when it cannot go on."""
        node, layout = error.node_index, self.engine.layout
        if node is None or layout is None or node in layout.ps_nodes:
            raise error  # the fork server, or a ps node: what lived there is gone
        if node not in layout.worker_nodes:
            return Lost(node, "idle", None, str(error), dict(setting), None, None)
        if len(layout.worker_nodes) < 2:
            raise NodeFailedError(f"{error}; it was the job's only worker", node) from None
        if self.backend.in_transition:
            raise NodeFailedError(f"{error}, while variables moved to their new nodes", node) from None
        new = dict(setting, worker=setting["worker"] - 1)
        return Lost(node, "worker", layout.worker_nodes.index(node), str(error), dict(setting), new,
                    plan(self.knobs, setting, new, "online"))

    def take_out(self, lost: Lost, step: int, sync: bool) -> None:
        """Takes ``lost``'s node out of the pool and records it; for a worker, once the other workers have
        stopped: the switch prepared ahead (for the old pool) is dropped, and a synchronous step in flight is
        discarded."""
        self._leave(lost, step, lost.action)
        if lost.new is not None:
            self.backend.discard()
            if sync:
                self._discard_step(lost)

    def ended(self, lost: Lost, step: int) -> None:
        """Records ``lost``'s node, lost as the job ended (it stopped before the switch without the node)."""
        self._leave(lost, step, "the job ended first")

    def _leave(self, lost: Lost, step: int, action: str) -> None:
        """Takes the node out of the pool (the tuner's space too) and records it."""
        cluster = self.engine.cluster
        cluster.lose(lost.node)
        self.engine.let_go(lost.node)
        if self.space is not None:
            self.space.nodes_alive = len(cluster.pool)
        address = cluster.addresses[lost.node]
        logger.warning("node %d (%s) lost at step %d: %s; %s", lost.node, address, step, lost.cause, action)
        self.recorder.node_lost(step=step, node=lost.node, address=address, role=lost.role, cause=lost.cause,
                                action=action)

    def _discard_step(self, lost: Lost) -> None:
        """Releases every gradient accumulator of the old layout, from a surviving worker's node."""
        engine = self.engine
        layout = engine.layout
        survivor = next(n for n in layout.worker_nodes if n != lost.node)
        graph, op = _graph.build_release_graph(
            [], engine.container, _graph.accumulators_of(engine.graphs[0], len(layout.worker_nodes)))
        filters = [f"/job:node/task:{n}" for n in sorted(set(layout.ps_nodes) | {survivor})]
        with tf.compat.v1.Session(engine.cluster.target(survivor), graph=graph,
                                  config=tf.compat.v1.ConfigProto(device_filters=filters)) as session:
            session.run(op)
