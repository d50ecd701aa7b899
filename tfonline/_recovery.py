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
- **a ps node**, with a ps and a worker left: the variables it held are
  gone, so the job goes back to its latest checkpoint (its start, when it
  has none yet): every worker stops, the repository is rewound to the
  checkpoint's step (as ``run(resume=True)`` rewinds it), and the job goes
  on from there on the same setting, or with one ps (else one worker) fewer
  when the nodes left cannot hold it, on the nodes left. The training since
  the checkpoint is lost: at most ``checkpoint_every_s`` of it.
- **any node a switch needed, lost while the switch was made** (its
  sessions opened, variables moved, threads restarted), or while ODMR's
  moved variables were still being created (its transition): what the
  switch left is not trusted, so the job goes back to its latest
  checkpoint as for a ps node, on the switch's new setting (one ps, else
  one worker, fewer when the nodes left cannot hold it). A switch that did
  not need the node ends first, and the node is then judged as above.
- **the last worker**, or the last ps and worker: the job stops, failed,
  as before; it can be resumed from its latest checkpoint
  (``run(resume=True)``).

A ps node is judged lost only once it cannot be reached (its process gone,
its port closed): while it answers, its variables can still move, and ODMR
moves them at the next switch without loss.

A node that says it is leaving (``tfonline node`` given SIGUSR1: a planned
drain, :class:`tfonline._control.Claim`) still answers, so nothing of it
is lost: it leaves the pool at once, the job switches off it by ODMR and TDR
(to the same setting on the nodes left, or one ps, else one worker, fewer),
and once no step uses it and nothing moves from it, the node is released and
stops (:meth:`Recovery.leaving`, :meth:`Recovery.departed`).

Each loss is a ``node_losses`` row: the node, its role, the step, the cause
and what the job did (for a ps node, the steps of training lost).

A node named in a given cluster that did not serve when the job started
joins it once it does: it goes to the end of the pool (so it moves no
setting already running), the tuner may propose settings that use it, and
a ``node_joins`` row records it (:meth:`Recovery.joined`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from tfonline import _graph, _resume
from tfonline._calls import node_of, threads_of
from tfonline._recorder import Recorder
from tfonline._sessions import Engine
from tfonline.exceptions import NodeFailedError
from tfonline.placement import balanced_placement
from tfonline.reconfig import Reconfig
from tfonline.reconfig.plan import Plan, plan, relocation
from tfonline.setting import short_form

logger = logging.getLogger("tfonline")


@dataclass(frozen=True)
class Back:
    """The checkpoint a job that lost a ps node goes back to: its path and training state (None: the start)."""

    path: str | None
    saved: dict[str, Any] | None

    @property
    def step(self) -> int:
        return int(self.saved["step"]) if self.saved is not None else 0


@dataclass(frozen=True)
class Lost:
    """A node the job goes on without."""

    node: int
    role: str  # "worker", "ps" or "idle"
    rank: int | None  # a worker's rank under the setting it was lost from
    cause: str  # what the driver saw (the NodeFailedError's message)
    old: dict[str, Any]
    new: dict[str, Any] | None  # the setting the job switches to (None: it stays)
    plan: Plan | None
    back: Back | None = None  # a ps node's, or one lost during a switch: where the job goes back to
    during: str | None = None  # the switch it was lost during ("the switch to ps2 w1"), if any
    paused: bool = False  # the workers had stopped for that switch: no step was in flight
    drained: bool = False  # it said it was leaving, and the job moved off it without loss

    @property
    def action(self) -> str:
        if self.new is None:
            return "it was not in use; the job went on"
        on = f"ps{self.new['ps']} w{self.new['worker']}"
        if self.drained:
            return f"the job moved off it (ODMR, TDR) and went on as {on}; nothing lost"
        if self.back is None:
            return f"the job went on as {on}: TDR over the worker(s) left"
        lost = f"lost during {self.during}; " if self.during else ""
        if self.back.path is None:
            return f"{lost}the job went back to its start (no checkpoint yet) and went on as {on}"
        return f"{lost}the job went back to its checkpoint at step {self.back.step} and went on as {on}"


class Recovery:
    """Judges a lost node and takes it out of the job (see the module's description).

    ``space`` is the tuner's :class:`~tfonline.tuner.space.KnobSpace` (None
    untuned); ``knobs`` the knob table the switches are planned with;
    ``keeper`` the job's :class:`~tfonline._keeper.Keeper` (its latest
    checkpoint is where a lost ps node's variables come back from).
    """

    def __init__(self, engine: Engine, backend: Reconfig, recorder: Recorder, knobs, space=None, keeper=None,
                 claim=None):
        self.engine, self.backend, self.recorder, self.knobs, self.space = engine, backend, recorder, knobs, space
        self.keeper = keeper
        self.claim = claim  # a tfonline._control.Claim: nodes of `tfonline node` can say they are leaving
        self.departing: list[Lost] = []  # nodes out of the pool, until the job is off them (then released)

    def leaving(self, setting: dict[str, Any]) -> Lost | None:
        """Takes the nodes that said they are leaving out of the pool (the job, on ``setting``, keeps its
        layout until the switch off them); returns the switch off those it uses (the last one's
        :class:`Lost`: its new setting holds on the nodes left, its plan is :func:`relocation`), or None.
        A node the job cannot do without (no ps and worker would be left) is let be: it stops at its own
        deadline, and its loss fails the job then."""
        if self.claim is None:
            return None
        found, engine, target = [], self.engine, setting  # several at once: each switch's target from the last
        for node, drain_s in self.claim.leaving().items():
            layout = engine.layout
            cause = f"node {node} ({engine.cluster.addresses[node]}) is leaving (a planned drain, {drain_s} s)"
            if layout is None or node not in layout.ps_nodes + layout.worker_nodes:
                found.append(Lost(node, "idle", None, cause, dict(setting), None, None, drained=True))
            else:
                new = self._fitting(target)
                if new is None:
                    logger.warning("%s, but without it no ps and worker are left: the job goes on with it", cause)
                    continue
                role = "ps" if node in layout.ps_nodes else "worker"
                found.append(Lost(node, role, None, cause, dict(setting), new,
                                  relocation(self.knobs, setting, new), drained=True))
                target = new
            engine.cluster.lose(node)
            if self.space is not None:
                self.space.nodes_alive = len(engine.cluster.pool)
        self.departing += found
        used = [lost for lost in found if lost.new is not None]
        return used[-1] if used else None

    def release_departed(self, step: int) -> None:
        """:meth:`departed` for each node that left the pool: the job is off them, or ends."""
        departing, self.departing = self.departing, []
        for lost in departing:
            try:
                self.departed(lost, step)
            except Exception as e:  # noqa: BLE001 (a helper's failure degrades the job, never fails it)
                logger.warning("node %d could not be released: %s: %s", lost.node, type(e).__name__, e)

    def departed(self, lost: Lost, step: int) -> None:
        """Records node ``lost.node``, which the job has moved off (no step uses it, nothing moves from it),
        and releases it: it stops."""
        address = self.engine.cluster.addresses[lost.node]
        self.engine.let_go(lost.node)  # what it is the master of: not waited for, once it stops
        logger.warning("node %d (%s) left at step %d: %s; %s", lost.node, address, step, lost.cause, lost.action)
        self.recorder.node_lost(step=step, node=lost.node, address=address, role=lost.role, cause=lost.cause,
                                action=lost.action)
        if not self.claim.release(lost.node):
            logger.warning("node %d (%s) does not answer its release: it stops at its own deadline", lost.node,
                           address)

    def close(self, step: int) -> None:
        """The job ends: the nodes that left are released."""
        self.release_departed(step)

    def judge(self, error: NodeFailedError, setting: dict[str, Any]) -> Lost:
        """What the job does without the node ``error`` names; raises ``error`` when it cannot go on."""
        node, layout = error.node_index, self.engine.layout
        if node is None or layout is None:
            raise error  # the fork server
        cause = str(getattr(error, "node_error", error))  # a FailedSwitch's: the node's own
        # The nodes that hold variables: the ps nodes, and in a transition those the moved variables come from.
        holding = set(layout.ps_nodes) | {node_of(source.device) for move in self.backend.moving
                                          for source in move.sources}
        if node not in holding and node not in layout.worker_nodes:
            return Lost(node, "idle", None, cause, dict(setting), None, None)
        if self.backend.in_transition:  # a step may have been creating a moved variable on it, or from it
            return self._back(error, cause, "ps" if node in holding else "worker", setting, setting,
                              "the move of variables to their new nodes")
        if node in layout.ps_nodes:
            return self._back(error, cause, "ps", setting, setting)
        if len(layout.worker_nodes) < 2:
            raise NodeFailedError(f"{error}; it was the job's only worker", node) from None
        new = dict(setting, worker=setting["worker"] - 1)
        return Lost(node, "worker", layout.worker_nodes.index(node), cause, dict(setting), new,
                    plan(self.knobs, setting, new, "online"))

    def judge_switch(self, error, old: dict[str, Any], new: dict[str, Any]) -> Lost:
        """What the job does without the node that ``error`` (a :class:`~tfonline._switcher.FailedSwitch`)
        names, lost while the switch from ``old`` to ``new`` was made (its workers stopped): back to the
        latest checkpoint on ``new`` (or as much of it as the nodes left hold). Raises ``error`` when it
        cannot go on."""
        node = error.node_index
        if node is None:
            raise error
        role = "idle"
        for setting in (new, old):  # its role under the old setting, else under the new one
            layout = self.engine.layout_of(setting)  # the node is still in the pool
            role = "ps" if node in layout.ps_nodes else "worker" if node in layout.worker_nodes else role
        return self._back(error, str(error.node_error), role, old, new,
                          f"the switch from {short_form(old)} to {short_form(new)}", paused=True)

    def _back(self, error: NodeFailedError, cause: str, role: str, old: dict[str, Any], base: dict[str, Any],
              during: str | None = None, paused: bool = False) -> Lost:
        """A loss the job goes back to its latest checkpoint for, on :meth:`_fitting` ``base``."""
        new = self._fitting(base)
        if new is None:
            raise NodeFailedError(f"{error}; no node is left for both a ps and a worker", error.node_index) from None
        keeper = self.keeper
        back = Back(keeper.latest, keeper.latest_saved) if keeper is not None and keeper.latest else Back(None, None)
        return Lost(error.node_index, role, None, cause, dict(old), new, None, back, during, paused)

    def _fitting(self, setting: dict[str, Any]) -> dict[str, Any] | None:
        """``setting`` if the pool less one node holds it, else with one ps fewer, else one worker fewer; None
        when no ps and worker would be left."""
        left = len(self.engine.cluster.pool) - 1
        new = dict(setting)
        for knob in ("ps", "worker"):
            if new["ps"] + new["worker"] > left and new[knob] > 1:
                new[knob] -= 1
        return new if new["ps"] + new["worker"] <= left else None

    def take_out(self, lost: Lost, step: int, sync: bool) -> None:
        """Takes ``lost``'s node out of the pool and records it; for a worker or a ps node, once the other
        workers have stopped: the switch prepared ahead (for the old pool) is dropped, and a synchronous
        step in flight is discarded."""
        action = lost.action
        if lost.back is not None:
            action += f"; {step - lost.back.step} steps of training lost"
        self._leave(lost, step, action)
        if lost.new is not None:
            self.backend.discard()
            if sync and not lost.paused:
                self._discard_step(lost)

    def ended(self, lost: Lost, step: int) -> None:
        """Records ``lost``'s node, lost as the job ended (it stopped before the switch without the node)."""
        self._leave(lost, step, "the job ended first")

    def joined(self, node: int, step: int) -> None:
        """Node ``node`` joined the pool (:meth:`tfonline.cluster.Cluster.join`): the tuner may use it."""
        cluster = self.engine.cluster
        if self.space is not None:
            self.space.nodes_alive = len(cluster.pool)
        address = cluster.addresses[node]
        logger.warning("node %d (%s) joined the job at step %d: %d nodes in use now", node, address, step,
                       len(cluster.pool))
        self.recorder.node_joined(step=step, node=node, address=address)

    def go_back(self, lost: Lost, state, start_workers) -> None:
        """After a lost ps node, or one lost during a switch (taken out): the job goes back to ``lost.back``
        on ``lost.new``'s nodes.

        Every session of the old layout is let go (each used the lost node);
        the repository is rewound to the checkpoint's step; the new setting's
        sessions initialise its variables, which take the checkpoint's values;
        and ``state`` goes on from the checkpoint's training state, its
        workers started by ``start_workers`` (under the state's lock).
        """
        engine, back, new = self.engine, lost.back, lost.new
        engine.let_go_all()
        self.backend.abandon()  # a switch it was lost during, or that switch's transition
        self.recorder.rewind(back.step)
        engine.input_position = back.saved["input_position"] if back.saved is not None else 0
        engine.cluster.set_threads_of({node: threads_of(new) for node in engine.nodes_of(new)})
        steps, apply = engine.open(new, balanced_placement(engine.partitions_for(new["ps"]), new["ps"]))
        if back.path is not None:
            engine.restore(_resume.cluster_values(back.path, _graph.GLOBAL_STEP_NAME))
        self.recorder.setting(new)
        state.go_back(back.saved, new, steps, apply, then=start_workers)
        self.recorder.phase(state.phase, back.step + 1)

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
        """Releases the old layout's gradient accumulators on the nodes left, from one of them: a step in
        flight leaves its survivors' gradients there."""
        engine = self.engine
        layout = engine.layout
        master = next(n for n in layout.worker_nodes + layout.ps_nodes if n != lost.node)
        sources = [(source, dtype) for source, dtype in
                   _graph.accumulators_of(engine.graphs[0], len(layout.worker_nodes))
                   if node_of(source.device) != lost.node]
        graph, op = _graph.build_release_graph([], engine.container, sources)
        nodes = {node_of(source.device) for source, _ in sources} | {master}
        filters = [f"/job:node/task:{n}" for n in sorted(nodes)]
        with tf.compat.v1.Session(engine.cluster.target(master), graph=graph,
                                  config=tf.compat.v1.ConfigProto(device_filters=filters)) as session:
            session.run(op)
