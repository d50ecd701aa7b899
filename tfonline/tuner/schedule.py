"""A fixed sequence of switches instead of a tuner: ``run(schedule=[(step, changes), ...])``.

For reproducing a sequence of reconfigurations: the correctness tests run
the same job with and without one and compare, and a benchmark can make the
same switches with each technique. The runner drives a :class:`Schedule`
exactly as it drives the tuning manager (segments, decisions, switches), so
a scheduled switch goes through the same code as a tuned one.
"""

from __future__ import annotations

from typing import Any, Sequence

from tfonline.exceptions import ConfigurationError
from tfonline.setting import resolve_setting
from tfonline.reconfig.plan import Plan, plan, switch_parts
from tfonline.timing import per_iteration_time
from tfonline.tuner.manager import Decision, SegmentRun, Triple
from tfonline.tuner.space import KnobSpace

NEVER = 10**15  # iterations: the segment after the last switch lasts until the job ends


def check_schedule(schedule: Any) -> list[tuple[int, dict[str, Any]]]:
    """The schedule's shape: ``(step, {knob: value, ...})`` pairs, steps >= 1 and increasing."""
    if not isinstance(schedule, (list, tuple)) or not schedule:
        raise ConfigurationError(f"schedule must be a non-empty list of (step, changes) pairs, got {schedule!r}")
    entries, previous = [], 0
    for i, entry in enumerate(schedule):
        if (not isinstance(entry, (list, tuple)) or len(entry) != 2 or isinstance(entry[0], bool)
                or not isinstance(entry[0], int) or not isinstance(entry[1], dict)):
            raise ConfigurationError(f"schedule entry {i} must be a (step, {{knob: value}}) pair, got {entry!r}")
        step, changes = entry
        if step <= previous:
            raise ConfigurationError(
                f"schedule steps must be >= 1 and increasing, got {step} at entry {i} after {previous}")
        entries.append((step, dict(changes)))
        previous = step
    return entries


class Schedule:
    """Switches to each scheduled setting once the job has run its step.

    Each entry's changes apply on top of the setting before it. A
    synchronous job switches after exactly that step: its workers hold there
    (:meth:`hold_step`), and the new setting's first iteration is the
    next step, so a schedule repeats bit for bit (``tfonline replay``). An
    asynchronous job switches at the first segment end at or after the
    step: the warm-up iterations after the previous switch, and the
    iterations its workers train while the switch is made (a live switch),
    can delay it by a few steps.
    """

    phase = "scheduled"

    def __init__(self, space: KnobSpace, start: dict[str, Any], schedule: Sequence[tuple[int, dict[str, Any]]],
                 technique: str = "online"):
        self.space, self.technique = space, technique
        self.current, self.start = dict(start), dict(start)
        self.steps: list[int] = []
        self.settings: list[dict[str, Any]] = []
        self.plans: list = []  # each switch's plan, from the setting before it
        setting = dict(start)
        for i, (step, changes) in enumerate(check_schedule(schedule)):
            try:
                setting = resolve_setting(dict(setting, **changes), space.node_count, space.cores,
                                          tuple(space.extra_knobs))
            except ConfigurationError as e:
                raise ConfigurationError(f"schedule entry {i} (step {step}): {e}") from None
            # resolve_setting checked the domains and ps + worker; a given cluster also fixes the thread pools.
            outside = [name for name in space.knobs if setting[name] not in space.values[name]]
            if outside:
                name = outside[0]
                raise ConfigurationError(f"schedule entry {i} (step {step}): {name}={setting[name]!r} is outside "
                                         f"what this cluster allows, {space.values[name]!r}")
            self.plans.append(plan(space.knobs, self.settings[-1] if self.settings else start, setting, technique))
            self.steps.append(step)
            self.settings.append(setting)
        self.done = 0
        self.triples: list[Triple] = []
        self.overhead_s = 0.0
        self._last_step = 0

    def segment_length(self) -> int:
        if self.done >= len(self.steps):
            return NEVER
        return max(1, self.steps[self.done] - self._last_step)

    def segment_seconds(self) -> float:
        return 0.0

    def hold_step(self) -> int | None:
        """The step the next switch comes after, in a synchronous job (None after the last): its workers hold
        there, so that the switch is made at exactly that step."""
        return self.steps[self.done] if self.done < len(self.steps) else None

    def upcoming(self) -> tuple[dict[str, Any], Plan] | None:
        """The next scheduled switch's setting and plan (None after the last): the driver prepares it ahead."""
        if self.done >= len(self.settings) or not self.space.fits(self.settings[self.done]):
            return None
        return dict(self.settings[self.done]), self.plans[self.done]

    def moved_to(self, setting: dict[str, Any], back_to: int | None = None) -> None:
        """The job runs ``setting`` now (a node was lost); the schedule's next switch goes on from it."""
        self.current = dict(setting)

    def observe(self, run: SegmentRun) -> None:
        if len(run.steps):
            self._last_step = max(self._last_step, int(run.steps[-1]))

    def on_segment_end(self, run: SegmentRun) -> Decision:
        per_iteration_s = per_iteration_time(run.walls, run.warmup)
        self.triples.append(Triple(run.setting, run.loss_before, per_iteration_s, None, None,
                                   "scheduled: no estimate of the time left"))
        self.observe(run)
        current, new, how = self.current, self.settings[self.done], self.plans[self.done]
        before = self.settings[self.done - 1] if self.done else self.start
        self.done += 1
        what = f"scheduled switch {self.done} of {len(self.steps)} (step {self.steps[self.done - 1]})"
        if not self.space.fits(new):  # nodes were lost, or have not joined yet
            return Decision(self.phase, current, current, False,
                            f"{what} not made: ps {new['ps']} + worker {new['worker']} need more than the "
                            f"{self.space.nodes_alive} node(s) in use")
        if current != before:  # a lost node moved the job elsewhere: the switch is planned from there
            how = plan(self.space.knobs, current, new, self.technique)
        self.current = dict(new)
        return Decision(self.phase, current, new, new != current, what,
                        parts=tuple(sorted(switch_parts(self.space.knobs, current, new))), plan=how)

    def record_cost(self, parts: Sequence[str], cost_s: float) -> None:
        """The runner records every cost in the repository; a schedule learns nothing from them."""
