"""The TensorFlow backend: each plan's technique carried out on the job's cluster.

=============  ==============================================  ====================
plan           what happens                                    where
=============  ==============================================  ====================
"ssr"          new sessions on the same graphs                 :mod:`.ssr`
"odmr", "tdr"  lazy moves, re-sharded input, node restarts     :mod:`.odmr`
"restart"      read all, rebuild, restore                      :mod:`.baselines`
"checkpoint"   save, restart every node, rebuild, restore      :mod:`.baselines`
=============  ==============================================  ====================
"""

from __future__ import annotations

from typing import Any, Callable

from tfonline._sessions import Engine
from tfonline.reconfig import baselines, odmr, ssr
from tfonline.reconfig.backend import Reconfig, SwitchContext, Switched
from tfonline.reconfig.plan import Plan


class TensorFlowReconfig(Reconfig):
    """Switches a job that trains on ``engine`` (:class:`tfonline._sessions.Engine`).

    ``technique`` is ``run(reconfig=...)``: "online" prepares switches ahead
    and makes them without a global stop where it can; the baselines pay
    their full price at the switch. ``reset_container`` drops the job's
    state on nodes that outlive it (the checkpoint baseline, on a cluster
    tfonline cannot restart).
    """

    def __init__(self, engine: Engine, technique: str, reset_container: Callable[[], None]):
        self.engine = engine
        self.technique = technique
        self._prepared: odmr.Prepared | None = None  # the next setting, made ready while the workers train
        self._transition: odmr.Prepared | None = None  # a switch whose moved variables may not all exist yet
        self._checkpoints = baselines.Checkpoints(reset_container)

    @property
    def in_transition(self) -> bool:
        return self._transition is not None

    @property
    def moving(self) -> list:
        """The variables the current transition moves (empty when none)."""
        return list(self._transition.moves) if self._transition is not None else []

    def prepare(self, old: dict[str, Any], new: dict[str, Any], plan: Plan) -> None:
        if plan.technique in ("restart", "checkpoint", "none"):
            return
        if not self._ready_for(new):
            self.discard()
            self._prepared = odmr.prepare(self.engine, old, new)

    def _ready_for(self, new: dict[str, Any]) -> bool:
        """Whether the switch prepared is to ``new``, on the nodes ``new`` uses now."""
        prepared = self._prepared
        return prepared is not None and prepared.setting == new and prepared.nodes == tuple(self.engine.nodes_of(new))

    def discard(self) -> None:
        prepared, self._prepared = self._prepared, None
        odmr.discard(prepared)

    def live(self, old: dict[str, Any], new: dict[str, Any], plan: Plan) -> bool:
        """Online techniques only, and when no node restarts: a restarted node stops every step that uses it,
        and what lived on a restarted ps is read and restored by the driver, which needs no step to write it
        meanwhile."""
        return (self.technique == "online" and plan.technique != "none"
                and not self.engine.restarted_by(new))

    def apply(self, old: dict[str, Any], new: dict[str, Any], plan: Plan, context: SwitchContext) -> Switched:
        if plan.technique == "restart":
            return baselines.restart(self.engine, old, new, context)
        if plan.technique == "checkpoint":
            return self._checkpoints.switch(self.engine, new, context)
        if self._prepared is not None and not self._ready_for(new):  # prepared for another switch
            self.discard()
        prepared, self._prepared = self._prepared, None
        if plan.sessions_only:
            return ssr.reopen_sessions(self.engine, prepared, old, new, context)
        prepared = prepared or odmr.prepare(self.engine, old, new)
        switched = odmr.relocate(self.engine, prepared, old, new, plan.technique, context)
        if switched.transition:
            self._transition = prepared
        return switched

    def settle(self, setting: dict[str, Any], swap: Callable[[list, Any], None]) -> None:
        """Ends the transition (see :func:`odmr.settle`): ``swap`` hands the driver the steady-state steps."""
        odmr.settle(self.engine, self._transition, setting, swap)
        self._transition = None  # not before: a node lost while it settles finds the job still in transition

    def abandon(self) -> None:
        self.discard()
        self._transition = None

    def close(self) -> None:
        self.discard()
        self._checkpoints.close()
