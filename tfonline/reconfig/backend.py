"""The backend hook of the design: how a driver carries out a decision's :class:`~tfonline.reconfig.Plan`.

A driver (tfonline's TensorFlow driver; a simulator) holds one
:class:`Reconfig`. For each switch it calls, in order:

1. :meth:`Reconfig.prepare` while the workers still train on the old
   setting (in the tuner's thread, as soon as the next setting is known);
2. :meth:`Reconfig.live`, to know whether the workers may go on training
   while the switch is made, or must pause at their iteration's end;
3. :meth:`Reconfig.apply`, which makes the switch and returns a
   :class:`Switched`: the new workers' steps, which the driver publishes
   at once, and what moved;
4. :meth:`Reconfig.settle`, when :attr:`Switched.transition` says so, once
   a step has run on the new setting and no step runs on the old one.

:meth:`Reconfig.close` ends the job's use of it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable

from tfonline.reconfig.plan import Plan


@dataclass(frozen=True)
class Switched:
    """What a switch hands the driver to publish.

    Attributes:
        steps: each new worker's training step (a callable returning
            ``(loss, _)``).
        apply: sync mode: the chief's apply step; None otherwise.
        bytes_moved: bytes the switch moved or will move (ODMR's lazy moves
            included).
        transition: the steps are transition steps: call :meth:`Reconfig.settle`
            after the new setting's first step.
    """

    steps: list
    apply: Any
    bytes_moved: int
    transition: bool = False


@dataclass(frozen=True)
class SwitchContext:
    """What the driver tells a switch about its workers.

    Attributes:
        workers_running: whether worker threads still run steps (a live
            switch), so sessions set aside must wait before they close.
        batches_read: how far the input moved since it was last opened, in
            batches of the round-robin order (past the furthest worker's
            batch, and past those a live switch's old workers may still
            read), and marks the input as being opened again; called once,
            by a switch that re-opens the input.
    """

    workers_running: bool
    batches_read: Callable[[], int]


class Reconfig(ABC):
    """Carries out switches from one setting to another for one job. Subclasses are the backends."""

    def prepare(self, old: dict[str, Any], new: dict[str, Any], plan: Plan) -> None:
        """Makes what the switch to ``new`` needs ready while the workers still train (default: nothing).

        A later call for another setting replaces what an earlier one made.
        """

    def discard(self) -> None:
        """Drops what :meth:`prepare` made, when the switch will not happen (default: nothing)."""

    def abandon(self) -> None:
        """A node was lost while a switch was prepared, made or in its transition: forgets all of it, as the
        job goes back to a checkpoint in fresh sessions (default: :meth:`discard`)."""
        self.discard()

    def live(self, old: dict[str, Any], new: dict[str, Any], plan: Plan) -> bool:
        """Whether the workers may go on training while the switch is made (default: no; they pause)."""
        return False

    @abstractmethod
    def apply(self, old: dict[str, Any], new: dict[str, Any], plan: Plan, context: SwitchContext) -> Switched:
        """Makes the switch; returns the new steps, which the driver publishes at once."""

    def settle(self, setting: dict[str, Any], swap: Callable[[list, Any], None]) -> None:
        """After a transition's first step on ``setting``, when no step runs on older steps: ends the
        transition; ``swap(steps, apply)`` hands the driver the steps the workers go on to (default: nothing)."""

    @property
    def in_transition(self) -> bool:
        """Whether a switch waits for :meth:`settle`."""
        return False

    def close(self) -> None:
        """The job ends: releases what the backend holds (default: nothing)."""
