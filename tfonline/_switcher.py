"""A decision's switch, made by the backend while the driver watches the nodes, then published and costed."""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

import tensorflow as tf

from tfonline._calls import essence
from tfonline._recorder import Recorder
from tfonline._state import TrainingState
from tfonline._workers import Workers
from tfonline.cluster import Cluster
from tfonline.exceptions import NodeFailedError, TfOnlineError
from tfonline.reconfig import Plan, Reconfig, SwitchContext, switch_parts
from tfonline.reconfig.cost import switch_cost
from tfonline.setting import short_form
from tfonline.tuner.manager import SegmentRun

logger = logging.getLogger("tfonline")

# A switch that has not finished after this long fails the job (a switch takes seconds at most).
SWITCH_TIMEOUT_S = 120.0
# A switch's call still running this long after a node is found dead waits on it: it is given up.
STUCK_S = 2.0
# A live switch's old workers may train on for this many times the last live switch's time to open (1 s
# before the first, at most OPENING_CAP_S), and at most MAX_ALLOWANCE steps each: the batches they may read
# then, the new input passes over (read or not), so the allowance bounds the data a switch passes over.
OPENING_MARGIN, FIRST_OPENING_S, OPENING_CAP_S, MAX_ALLOWANCE = 1.5, 1.0, 30.0, 64


class FailedSwitch(NodeFailedError):
    """A node was lost while a switch, or a job's way back after a loss, was made (:meth:`Switcher.watched`);
    ``node_error`` is the node's own failure."""

    def __init__(self, message: str, node_error: NodeFailedError):
        super().__init__(message, node_error.node_index)
        self.node_error = node_error


@dataclass(frozen=True)
class _Made:
    """A switch made, whose cost is recorded once the new setting's first iterations are in."""

    step: int
    old: dict[str, Any]
    new: dict[str, Any]
    plan: Plan
    bytes_moved: int
    origin: tuple  # (step, wall time, old pace): where the cost is counted from (switch_cost)
    parts: tuple[str, ...]


class Switcher:
    """Makes switches through ``backend`` on ``cluster``, publishes them to ``state`` and records their cost.

    ``learn(parts, cost)`` hands each measured cost to the tuner (it may be
    None: no tuner).
    """

    def __init__(self, state: TrainingState, workers: Workers, backend: Reconfig, cluster: Cluster,
                 recorder: Recorder, knobs):
        self.state, self.workers, self.backend, self.cluster = state, workers, backend, cluster
        self.recorder, self.knobs = recorder, knobs
        self.made: _Made | None = None  # the last switch, until its cost is recorded
        self.opening_s = FIRST_OPENING_S  # how long the last live switch took to open the new setting
        self.observed: SegmentRun | None = None  # the old setting's last points, for the tuner after a switch

    def live(self, new: dict[str, Any], how: Plan) -> bool:
        """Whether the switch to ``new`` happens with no global stop: each worker goes on to the new setting
        at its own next iteration boundary, while the switch is made beside it.

        Asynchronous jobs only (a synchronous step is a barrier anyway), while
        the workers train (not after a lost node stopped them), when the
        backend can make it beside the training (:meth:`Reconfig.live`).
        Other switches pause the workers, each at its iteration's end, and
        resume them together.
        """
        return not self.state.sync and self.workers.running and self.backend.live(self.state.setting, new, how)

    def switch(self, new: dict[str, Any], how: Plan, observe: bool) -> None:
        """Carries out a switch through the backend, watched (see :meth:`watched`), and publishes it; the
        workers are paused, or, for a live switch, still training on the old setting until it is published.
        With ``observe``, the old setting's last points are kept for the tuner (:attr:`observed`)."""
        state = self.state
        origin = state.switch_origin()
        self.observed = None
        old = state.setting
        given_up = threading.Event()  # set by watched, under the state's lock: nothing is published after

        def switch() -> None:
            if self.backend.in_transition:  # the last switch's moved variables: settled first
                while not state.settled():  # a step from before the last switch is still running
                    time.sleep(0.01)
                self.settle()
            live = self.live(new, how)
            allowance = self.allowance(origin[2]) if live else 0
            context = SwitchContext(workers_running=self.workers.running,
                                    batches_read=lambda: state.batches_read(allowance))
            opening = time.monotonic()
            switched = self.backend.apply(old, new, how, context)
            if live:
                self.opening_s = min(time.monotonic() - opening, OPENING_CAP_S)
            self.recorder.setting(new)
            # A live switch's new workers start at the publish; after a pause, all of them.
            self.observed = state.publish(new, switched.steps, switched.apply, observe, then=self.workers.start_locked,
                                          unless=given_up)
            if given_up.is_set():
                return
            self.made = _Made(state.step, old, new, how, switched.bytes_moved, origin,
                              tuple(sorted(switch_parts(self.knobs, old, new))))

        self.watched(switch, f"the switch from {short_form(old)} to {short_form(new)} at step {state.step}",
                     given_up)

    def allowance(self, pace_s: float | None) -> int:
        """The steps each of a live switch's old workers may still start while the new setting opens: as
        many as it runs (the job's pace is ``pace_s`` per iteration) in :data:`OPENING_MARGIN` times the last
        opening's time, at least 1 and at most :data:`MAX_ALLOWANCE`. The new input starts after their
        batches (:meth:`TrainingState.batches_read`); a worker that would start one more waits for the new
        setting."""
        if not pace_s or pace_s <= 0:
            return 1
        # pace_s is the job's: each of the n workers starts a step every n * pace_s
        per_worker_s = pace_s * len(self.state.steps)
        return max(1, min(MAX_ALLOWANCE, math.ceil(OPENING_MARGIN * self.opening_s / per_worker_s)))

    def settle(self) -> None:
        """Ends a switch's transition (:meth:`Reconfig.settle`): the workers go on to the steps it hands over."""
        self.backend.settle(self.state.setting, self.state.swap_steps)

    def watched(self, call: Callable[[], None], what: str, given_up: threading.Event | None = None) -> None:
        """Runs ``call`` (TensorFlow calls of a switch) in a helper thread while this thread watches the nodes.

        A TensorFlow call that needs a node which died blocks for good (gRPC
        keeps retrying it), and Python cannot interrupt a thread inside one.
        So the call runs beside this thread, which checks the nodes every
        0.2 s. When a node is found dead, the call has :data:`STUCK_S` more
        to end: if it ends well, it did not need the node, and the monitor
        takes the node out at its next check; else this raises
        :class:`FailedSwitch` naming the node (the monitor goes back to the
        latest checkpoint without it, see :mod:`tfonline._recovery`), and the
        stuck helper thread is abandoned (a daemon). ``given_up`` is set then,
        under the state's lock, so that a call that ends later publishes
        nothing (:meth:`TrainingState.publish`).
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
                try:
                    self.cluster.check_alive()
                except NodeFailedError:
                    if done.wait(STUCK_S) and not outcome:
                        return  # it did not need the node
                    raise
                if time.monotonic() > deadline:
                    raise TfOnlineError(f"{what} did not finish within {SWITCH_TIMEOUT_S:.0f} s; the job stopped")
            if outcome:
                dead = self.dead_node()
                if dead is not None:
                    raise dead from outcome[0]
                if isinstance(outcome[0], tf.errors.OpError):
                    raise TfOnlineError(f"{what} failed: {type(outcome[0]).__name__}: "
                                        f"{essence(outcome[0].message)}") from outcome[0]
                raise outcome[0]
        except NodeFailedError as e:
            if given_up is not None:
                with self.state.lock:
                    given_up.set()
            raise FailedSwitch(f"{e}, during {what}; the job stopped rather than train on parameters "
                               f"the switch may have left half-moved", e) from None

    def dead_node(self, within_s: float = 2.0) -> NodeFailedError | None:
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

    def record_cost(self, learn: Callable[[list, float], None] | None, ended: bool = False) -> None:
        """Records the last switch's cost (:func:`switch_cost`) once the new setting's first iterations
        are in: each worker's first, then up to 3 rounds to time the new pace (fewer when the job ``ended``
        or the next switch comes first). ``learn(parts, cost)`` hands it to the tuner."""
        made = self.made
        n, points = self.state.first_points()
        if made is None or len(points) < 4 * n + 1 and not ended:
            return
        self.made = None
        cost = during = None  # the job ended before the new setting's first iteration: no cost measured
        if points:
            cost, during = switch_cost(points, n, *made.origin)
            if learn is not None:
                learn(list(made.parts), cost)
        self.recorder.reconfiguration(step=made.step, old=made.old, new=made.new, plan=made.plan,
                                      bytes_moved=made.bytes_moved, cost_s=cost, iterations_during=during)
