"""A tuner's decision on a segment, recorded: shared by the driver's monitor and the simulator."""

from __future__ import annotations

from dataclasses import replace

from tfonline._recorder import Recorder
from tfonline._state import TrainingState
from tfonline.tuner.manager import Decision


def record_decision(recorder: Recorder, state: TrainingState, manager, decision: Decision, triple, segment: int,
                    old_phase: str, estimator_name: str | None, first: str | None = None) -> Decision:
    """Records ``decision`` on ``segment`` (its ``triple``, the decision row, a new phase) and returns it.

    When something came ``first`` (e.g. "the job ended first"), a decision to
    switch is recorded as not applied, with that reason. A decision to stay lets the segment go on
    (:meth:`TrainingState.go_on`); a switch is then the caller's to make.
    """
    recorder.triple(triple, segment, estimator_name)
    if first and decision.switch:
        decision = replace(decision, switch=False, reason=f"not applied, {first}: " + decision.reason)
    recorder.decision(decision, state.step, state.smoothed.value)
    if decision.gp_fit is not None:
        recorder.gp_fit(decision.gp_fit, state.step)
    if manager.phase != old_phase:
        recorder.phase(manager.phase, state.step + 1)
    state.phase = decision.phase
    if not decision.switch:
        state.go_on(manager.segment_length())
        recorder.segment_phase(state.segment, state.phase)
    return decision
