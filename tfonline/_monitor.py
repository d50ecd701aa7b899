"""The monitor: the driver's loop while the workers train, and the tuner's hand-over.

Every 0.2 s, or when woken (a stop, a decision made, a segment's last
iteration), the monitor checks the nodes and the limits, records the last
switch's cost once measurable, ends a switch's transition, writes the
periodic checkpoints and the TensorBoard events, keeps the ETA and the display, and hands each finished segment to the tuner in a
background thread. A decision to switch comes back to it, and it has the
:class:`~tfonline._switcher.Switcher` make the switch. A failing tuner
degrades the job to untuned (:meth:`Monitor.stop_tuning`).
"""

from __future__ import annotations

import contextlib
import logging
import time
from concurrent.futures import Future

from tfonline._calls import DaemonExecutor
from tfonline._decisions import record_decision
from tfonline._eta import Progress
from tfonline._recorder import Recorder
from tfonline._sessions import Engine
from tfonline._state import Stop, TrainingState
from tfonline._switcher import FailedSwitch, Switcher
from tfonline._workers import Workers
from tfonline.exceptions import NodeFailedError, TfOnlineError, essence
from tfonline.tuner.manager import Decision, SegmentRun

logger = logging.getLogger("tfonline")

# At the job's end, the tuner's last call (a decision, a switch prepared ahead) may take this long.
TUNER_WAIT_S = 30.0
# After a node is lost, a tuner's call still running after this long waits on the node: it is given up.
TUNER_STUCK_S = 5.0


class Monitor:
    """Runs the job's training to its end: segments, decisions and switches.

    ``manager`` is the tuner (a :class:`~tfonline.tuner.manager.TuningManager`
    or a :class:`~tfonline.tuner.schedule.Schedule`), or None for a fixed
    setting. ``limit_s`` is ``max_seconds`` from ``started`` (monotonic).
    """

    def __init__(self, state: TrainingState, workers: Workers, switcher: Switcher, engine: Engine,
                 recorder: Recorder, progress: Progress, manager, *, estimator_name: str | None,
                 limit_s: float | None, started: float, keeper=None, board=None, recovery=None):
        self.state, self.workers, self.switcher, self.engine = state, workers, switcher, engine
        self.keeper = keeper  # a tfonline._keeper.Keeper: the periodic checkpoints
        self.board = board  # a tfonline.tensorboard.EventWriter: the live TensorBoard events
        self.recovery = recovery  # a tfonline._recovery.Recovery: the job goes on without a lost node
        self._lost = None  # a lost worker, until the switch without it
        self._drain = None  # a node that leaves (a planned drain), until the switch off it
        self.backend, self.cluster = switcher.backend, switcher.cluster
        self.recorder, self.progress, self.manager = recorder, progress, manager
        self.estimator_name, self.limit_s, self.started = estimator_name, limit_s, started
        self.tuning_overhead_s: float | None = None  # the tuner's, once it stopped
        self._tuner: DaemonExecutor | None = None
        self._deciding: Future | None = None  # the tuner's decision on the last segment, while it runs
        if manager is not None:
            state.phase = manager.phase

    @property
    def overhead_s(self) -> float | None:
        return self.manager.overhead_s if self.manager is not None else self.tuning_overhead_s

    # -- the loop --------------------------------------------------------------

    def train(self) -> tuple[str, str]:
        """Trains until the job stops; returns its status and reason, or raises its error."""
        state = self.state
        self._tuner = DaemonExecutor("tfonline-tuner")
        state.begin()
        try:
            while True:
                self._next_segment()
                switch = self._run_segment()
                if self.switcher.made is not None:  # the job ends, or the next switch comes, first
                    self.switcher.record_cost(self._learn, ended=True)
                if switch is None:
                    if self._lost is not None:  # the job ended while it stopped its workers to leave the node
                        self.recovery.ended(self._lost, state.step)
                        self._lost = None
                    state.end()
                    break
                if self._lost is not None:  # the workers left have stopped: the node is taken out
                    lost, self._lost = self._lost, None
                    self._recover(lost)
                    if lost.back is not None:
                        continue
                old, drain, self._drain = state.setting, self._drain, None
                try:
                    self.switcher.switch(switch.candidate, switch.plan, observe=self.manager is not None)
                except FailedSwitch as e:
                    self._back_without(e, old, switch.candidate)
                    continue
                if self.switcher.observed is not None and self.manager is not None:  # trained while it decided
                    with self.tuner_faults():
                        self.manager.observe(self.switcher.observed)
                if drain is not None and self.manager is not None:
                    with self.tuner_faults():
                        self.manager.moved_to(drain.new)
        except NodeFailedError as e:  # during a switch: what waits on the node is not waited for
            self._give_up_on(e.node_index)
            raise
        finally:  # workers a switch left running, when it failed; the tuner's last call; nodes that leave
            state.stopped.set()
            self.workers.join()
            self._tuner.shutdown(TUNER_WAIT_S)
            if self.recovery is not None:
                self.recovery.close(state.step)
        stop = state.stop
        if stop.error is not None and not isinstance(stop.error, NodeFailedError):
            # A worker's TensorFlow error may be the symptom of a dead node
            # whose exit the driver has not seen yet.
            dead = self.switcher.dead_node()
            if dead is not None:
                stop = Stop("failed", str(dead), dead)
        if stop.error is not None:
            raise stop
        return stop.status, stop.reason

    def _next_segment(self) -> None:
        """The segment's goal, and a schedule's next switch (or the tuner's next random setting) prepared ahead."""
        if self.manager is None:
            return
        with self.tuner_faults():
            self.state.goal = self.manager.segment_length() + self.state.warmup
            self.state.hold_at = self._hold_step()
            upcoming = self._upcoming() or self._ahead()
            if upcoming is not None:
                self._tuner.submit(self.backend.prepare, dict(self.state.setting), *upcoming)

    def _run_segment(self) -> Decision | None:
        """Trains under the current setting until the job stops (None) or the tuner decides to switch (its decision).

        When a tuner's segment is complete, the segment is handed to the tuner
        in a background thread and training goes on under the same setting
        (see :meth:`_hand_over`); a decision to stay lets it go on. A decision
        to switch either pauses the workers, or, for a live switch
        (:meth:`Switcher.live`), returns with them still training.
        """
        state, workers = self.state, self.workers
        workers.start()
        switch = None
        try:
            while not self._wait(0.2):
                try:
                    self._check()
                except NodeFailedError as e:
                    switch = self._without(e)
                    if switch is not None:
                        break
                    continue
                switch = self._leaving()
                if switch is not None:
                    break
                if self.manager is None:
                    if workers.pause.is_set() and not state.stopped.is_set():
                        self._resume_untuned()
                    continue
                if self._deciding is None:
                    with self.tuner_faults():
                        if self._segment_complete():
                            self._hand_over()
                elif self._deciding.done():
                    decision = self._take_decision()
                    if decision is not None and decision.switch:  # _decide paused the workers unless it is live
                        switch = decision
                        break
        except NodeFailedError as e:
            self._give_up_on(e.node_index)
            state.request_stop(Stop("failed", str(e), e))
        except BaseException:
            self._deciding = None  # the job fails or is interrupted: the decision no longer matters
            raise
        finally:
            if switch is None:
                state.stopped.set()
            if state.stopped.is_set() or workers.pause.is_set():
                workers.join()
            workers.pause.clear()
            if self._deciding is not None:
                self._take_decision(first="the job ended first" if switch is None else self._node_first())
        return None if state.stopped.is_set() else switch

    def _without(self, error: NodeFailedError) -> Decision | None:
        """The job goes on without the node ``error`` names (:mod:`tfonline._recovery`): the switch without a
        lost worker (its thread is given up on, the others pause) or ps node (every worker's thread is given
        up on), or None (an idle node: taken out at once). Raises ``error`` when the job cannot go on."""
        if self.recovery is None:
            raise error
        state = self.state
        lost = self.recovery.judge(error, state.setting)
        if lost.new is None:
            self.recovery.take_out(lost, state.step, state.sync)
            return None
        self._lost = lost
        if lost.back is not None:  # the job goes back: no step of the layout it leaves is waited for
            self.workers.abandon_all()
        else:
            self._abandon_workers_on(lost.node)
        self.workers.pause.set()
        state.take_failure()  # a worker's step that failed on the lost node, before its thread was given up
        self._give_up_stuck_tuner(lost.node)
        return Decision(self.state.phase, lost.old, lost.new, True, lost.action, plan=lost.plan)

    def _leaving(self) -> Decision | None:
        """Nodes that said they are leaving (:meth:`Recovery.leaving`): the switch off those the setting uses
        (the workers pause for it unless it is live), or None."""
        lost = self.recovery.leaving(self.state.setting) if self.recovery is not None else None
        if lost is None:
            return None
        self._drain = lost
        if not self.switcher.live(lost.new, lost.plan):
            self.workers.pause.set()
        return Decision(self.state.phase, dict(self.state.setting), lost.new, True, lost.action, plan=lost.plan)

    def _node_first(self) -> str:
        """Why the switch a node's loss or departure made came before the tuner's decision in flight."""
        return f"node {self._lost.node} was lost first" if self._lost else f"node {self._drain.node} left first"

    def _back_without(self, error: FailedSwitch, old: dict, new: dict) -> None:
        """A node lost while the switch from ``old`` to ``new`` was made: the job goes back to its latest
        checkpoint without it (:meth:`Recovery.judge_switch`), or fails when it cannot. The workers a live
        switch left running are given up on: what they train from now is lost anyway."""
        if self.recovery is None:
            raise error
        lost = self.recovery.judge_switch(error, old, new)
        self.workers.abandon_all()
        self.state.take_failure()
        self._give_up_stuck_tuner(lost.node)
        self._recover(lost)

    def _give_up_stuck_tuner(self, node: int) -> None:
        """A tuner's decision, or a switch prepared ahead, still running after :data:`TUNER_STUCK_S` waits on
        lost node ``node``: it is given up."""
        if not self._tuner.idle(TUNER_STUCK_S):
            logger.warning("the tuner's call in flight waits on lost node %d: given up", node)
            self._tuner, self._deciding = DaemonExecutor("tfonline-tuner"), None

    def _give_up_on(self, node: int | None) -> None:
        """The job fails on lost node ``node``: the workers whose steps wait on it, and the sessions it is the
        master of, are not waited for (a call whose master is a dead node never returns)."""
        layout = self.engine.layout
        if node is None or layout is None or node not in layout.ps_nodes + layout.worker_nodes:
            return
        if node in layout.ps_nodes:  # every session used it
            self.engine.let_go_all()
        else:
            self.engine.let_go(node)
        self._abandon_workers_on(node)

    def _abandon_workers_on(self, node: int) -> None:
        """Gives up the worker threads whose steps use ``node`` of the current layout: its worker's (every
        one's, for a ps node; the one thread of a synchronous job)."""
        layout = self.engine.layout
        every = self.state.sync or node in layout.ps_nodes
        for rank in range(1 if self.state.sync else len(layout.worker_nodes)):
            if every or layout.worker_nodes[rank] == node:
                self.workers.abandon(rank)

    def _recover(self, lost) -> None:
        """Takes the lost worker or ps node out of the job (its workers stopped); after a ps node, the job goes
        back to its latest checkpoint. The tuner is told the setting the job runs on after."""
        state = self.state
        self.switcher.watched(lambda: self.recovery.take_out(lost, state.step, state.sync),
                              f"taking node {lost.node} out of the job")
        if lost.back is not None:
            self.switcher.watched(lambda: self.recovery.go_back(lost, state, self.workers.start_locked),
                                  f"going back to step {lost.back.step} without node {lost.node}")
        if self.manager is not None:
            with self.tuner_faults():
                self.manager.moved_to(lost.new, None if lost.back is None else lost.back.step)

    def _check(self) -> None:
        """One round of the loop's chores, beside the training."""
        state = self.state
        failure = state.take_failure()
        if failure is not None:  # a worker's step failed: a lost node's symptom, or the job's end
            dead = self.switcher.dead_node()
            if dead is not None:
                raise dead
            state.request_stop(failure)
            return
        self.cluster.check_alive()
        for node in self.cluster.join():
            if self.recovery is not None:
                self.recovery.joined(node, state.step)
        if self.limit_s is not None and time.monotonic() - self.started >= self.limit_s:
            state.request_stop(Stop("stopped", f"max_seconds ({self.limit_s:g} s) reached"))
        if self.switcher.made is not None:
            self.switcher.record_cost(self._learn)
        if self.backend.in_transition and state.settled(stepped=True):
            self.switcher.watched(self.switcher.settle,
                                  f"the move of variables to their new nodes after step {state.step}")
        if self.engine.retired and state.settled():  # no step runs on them any more
            self.engine.close_retired()
        if self.recovery and self.recovery.departing and not (self.backend.in_transition or self.engine.retired) \
                and state.settled():  # the job is off the nodes that leave: no step on them, nothing moves from them
            self.recovery.release_departed(state.step)
        if self.keeper is not None and self.keeper.due() and not self.backend.in_transition:
            self.keeper.periodic()
        if self.board is not None and self.board.due():
            self.board.write_safely()
        self.progress.tick()

    def _wait(self, timeout_s: float) -> bool:
        """Waits for a stop, a decision or a segment's last iteration, at most ``timeout_s``; returns whether
        the job stops."""
        self.state.wake.wait(timeout_s)
        self.state.wake.clear()
        return self.state.stopped.is_set()

    def _resume_untuned(self) -> None:
        """Workers that a decision paused before tuning stopped train on, on the current setting."""
        self.workers.join()
        self.workers.pause.clear()
        self.workers.start()

    # -- the tuner ---------------------------------------------------------------

    def _upcoming(self):
        """A schedule's next switch, (setting, plan), when it is not to the current setting; else None."""
        upcoming = getattr(self.manager, "upcoming", None)
        upcoming = upcoming() if upcoming is not None else None
        return upcoming if upcoming is not None and upcoming[0] != self.state.setting else None

    def _hold_step(self) -> int | None:
        """The step a synchronous job's workers hold after, for the schedule's next switch to come right after it
        (None: no hold)."""
        hold = getattr(self.manager, "hold_step", None)
        return hold() if self.state.sync and hold is not None else None

    def _ahead(self):
        """The tuner's next random setting, (setting, plan), when it knows one other than the current setting."""
        ahead = getattr(self.manager, "ahead", None)
        ahead = ahead() if ahead is not None else None
        return ahead if ahead is not None and ahead[0] != self.state.setting else None

    def _segment_complete(self) -> bool:
        state = self.state
        if state.hold_at is not None:
            return state.held()
        return (state.done() >= self.manager.segment_length() + state.warmup
                and time.monotonic() - state.segment_started >= self.manager.segment_seconds())

    def _hand_over(self) -> None:
        """Ends the tuner's segment and starts its decision in the background; training goes on.

        The next segment starts at once under the same setting. Its iterations
        until the decision is in are left out of its timing (the tuner shares
        the machine meanwhile), and it is timed for its full length after that.
        """
        run, ended = self.state.hand_over()
        upcoming = self._upcoming()
        if upcoming is not None and not self.switcher.live(*upcoming):
            # A schedule switches at its step: the workers stop now, and wait for the preparation if it is
            # still running (it started when the segment did).
            self.workers.pause.set()
        self._deciding = self._tuner.submit(self._decide, run, ended)
        self._deciding.add_done_callback(lambda _: self.state.wake.set())

    def _decide(self, run: SegmentRun, segment: int) -> tuple[Decision, int, str]:
        """The tuner's decision on ``run`` (in the tuner's thread); a switch is prepared at once."""
        old_phase = self.manager.phase
        decision = self.manager.on_segment_end(run)
        if decision.switch:
            self.backend.prepare(dict(self.state.setting), decision.candidate, decision.plan)
            if not self.switcher.live(decision.candidate, decision.plan):
                self.workers.pause.set()  # the workers stop at their next iteration's end
        return decision, segment, old_phase

    def _take_decision(self, first: str | None = None) -> Decision | None:
        """Records the background decision; a switch is then the caller's to make.

        When something came ``first`` (the job ended, a node was lost), a
        decision to switch is recorded as not applied, with that reason.
        None: the tuner failed, and tuning stopped (:meth:`stop_tuning`).
        """
        future, self._deciding = self._deciding, None
        with self.tuner_faults():
            decision, segment, old_phase = future.result()
            triple = self.manager.triples[-1]
            self.state.hold_at = self._hold_step()  # the next one: the held workers are paused for the switch
        if self.manager is None:
            return None
        return record_decision(self.recorder, self.state, self.manager, decision, triple, segment, old_phase,
                               self.estimator_name, first)

    def _learn(self, parts: list, cost_s: float) -> None:
        """A switch's measured cost, for the tuner's cost model."""
        if self.manager is not None:
            with self.tuner_faults():
                self.manager.record_cost(parts, cost_s)

    @contextlib.contextmanager
    def tuner_faults(self):
        """Turns an error of the tuner (or a schedule) into :meth:`stop_tuning`; nothing else is caught.

        The workers a decision had paused train on: the loop resumes them (:meth:`_run_segment`).
        """
        try:
            yield
        except (Stop, TfOnlineError):  # the job's own stops, and a node's failure, stay what they are
            raise
        except Exception as e:
            if self.manager is not None:
                self.stop_tuning(e)
            else:  # tuning has stopped already
                logger.debug("after tuning stopped: %s: %s", type(e).__name__, e)

    def stop_tuning(self, error: BaseException) -> None:
        """A failing tuner degrades the job: it goes on, untuned, on its current setting.

        The decision row says why ("tuning stopped at step N: ..."), the phase
        becomes "untuned", and the report shows both.
        """
        state = self.state
        step = state.step  # read once: the workers train on meanwhile
        reason = f"tuning stopped at step {step}: {type(error).__name__}: {essence(str(error))}"
        logger.warning("%s; the job goes on, untuned, on its current setting", reason)
        manager, self.manager = self.manager, None
        self.tuning_overhead_s = getattr(manager, "overhead_s", None)
        self._deciding = None  # a decision still running is not taken
        state.goal = None
        state.hold_at = None  # workers held for a scheduled switch train on
        state.phase = "untuned"
        with contextlib.suppress(Exception):
            self.backend.discard()
        self.recorder.tuning_stopped(step, state.setting, state.smoothed.value, reason)
        self.recorder.phase("untuned", step + 1)
