"""A simulated job: the driver's training state, recorder and estimator, and the real tuner, on a modelled cluster.

:func:`simulate` runs one job the way the TensorFlow driver does, on a
simulated clock: iterations go through the same
:class:`~tfonline._state.TrainingState` (segments, stopping rules) and
:class:`~tfonline._recorder.Recorder` (every repository row), the ETA through
the same :class:`~tfonline._eta.Progress`, segments to the real
:class:`~tfonline.tuner.manager.TuningManager`, and its decisions through the
same :func:`~tfonline._decisions.record_decision`. Only the iterations' times
and losses, and the switches' costs, come from the models
(:mod:`tfonline.simulator.model`). So ``tfonline report`` reads a simulated
job as it reads a real one.

:func:`fixed_runs` runs many fixed settings at once, in arrays: the
paper's comparison of random settings, at its scale, in seconds.
"""

from __future__ import annotations

import math
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

import numpy as np

from tfonline._decisions import record_decision
from tfonline._eta import Progress, prior_for
from tfonline._recorder import Recorder
from tfonline._state import SmoothedLoss, Stop, TrainingState
from tfonline.estimator import get_estimator
from tfonline.exceptions import ConfigurationError
from tfonline.repository import Repository
from tfonline.setting import resolve_setting
from tfonline.simulator.model import LossCurve, SpeedModel, SwitchCosts
from tfonline.tuner import Tuning
from tfonline.tuner.manager import SegmentRun
from tfonline.tuner.space import KnobSpace

# A simulated job records an estimate every second of simulated time, as the driver does, or every
# 1/ESTIMATES_PER_E of the training time so far when that is longer: about 20 per e-fold of the job
# (170 in a 2-hour job), since each costs an estimator fit of real time.
ESTIMATES_PER_E = 20
# A fixed run stops here if it has not converged (it counts as stopped, at its time then).
MAX_FIXED_ITERATIONS = 10_000_000
# Iterations drawn at a time (the job's models are evaluated on arrays of this many).
CHUNK = 256


@dataclass
class Workload:
    """A modelled job on a modelled cluster of ``nodes`` nodes on ``hosts`` machines."""

    name: str
    nodes: int
    speed: SpeedModel
    curve: LossCurve
    target_loss: float
    model_bytes: float
    switches: SwitchCosts = field(default_factory=SwitchCosts)
    start_s: float = 5.0  # from the job's start to its cluster's first step
    time_noise: float = 0.05
    smoothing_window: int = 20
    # The machine's drift (Simulation only): every drift_period_s, every iteration's time is multiplied by a new
    # lognormal factor of mean 1 and this relative deviation, so that one setting's segments differ by more than
    # their iterations' own noise says, and a longer segment averages more of the drift. 0: none.
    drift: float = 0.0
    drift_period_s: float = 10.0

    def __post_init__(self):
        if not (self.drift >= 0 and self.drift_period_s > 0):
            raise ConfigurationError(f"a workload's drift must be >= 0 and its drift_period_s > 0, got "
                                     f"drift={self.drift!r}, drift_period_s={self.drift_period_s!r}")

    @property
    def mode(self) -> str:
        return "sync" if self.speed.sync else "async"

    def space(self, restrict: dict[str, Any] | None = None) -> KnobSpace:
        return KnobSpace(self.nodes, self.speed.cores, restrict)

    def default_setting(self) -> dict[str, Any]:
        return resolve_setting({}, self.nodes, self.speed.cores)

    def compile_s(self, setting: dict[str, Any]) -> float:
        return float(self.speed.compile_s.get(setting.get("global_jit_level", "OFF"), 0.0))

    def switch_cost(self, decision) -> tuple[float, int]:
        """The cost of a decision's switch and the bytes it moves: its plan's technique, and XLA's compile
        when the switch has a compile part (:func:`tfonline.reconfig.switch_parts` names it "knob=value")."""
        compiles = any("=" in part for part in decision.parts)
        return self.switches.cost_s(decision.plan, self.model_bytes,
                                    self.compile_s(decision.candidate) if compiles else 0.0)

    def draw(self, setting: dict[str, Any], n: int, progress: float,
             rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        """``n`` iterations of ``setting`` from ``progress``: each one's time since the last (the job's
        pace), its worker step's time and its loss; and the progress after them."""
        noise = np.clip(1 + self.time_noise * rng.standard_normal(n), 0.2, None)
        ahead = progress + self.curve.progress_per_iteration(setting, self.speed.sync, progress) * np.arange(1, n + 1)
        losses = self.curve.loss(ahead) * (1 + self.curve.noise * rng.standard_normal(n))
        return (self.speed.iteration_s(setting) * noise, self.speed.step_s(setting) * noise, losses,
                float(ahead[-1]))


def paper_scale(mode: str = "async") -> Workload:
    """The paper's cluster, modelled: 36 machines of 8 cores on 1 Gbps, a 100 MB sparse model, hours to train.

    Its coefficients are set by hand to the paper's regime (ps nodes the
    bottleneck at many workers, XLA slower on CPU with 30-60 s of compile),
    not measured; its drift is this machine's: calibrate one from runs for a real machine
    (``tfonline calibrate``).
    """
    speed = SpeedModel([0.2, 0.4, 0.005, 0.02, 0.6, 0.1, 0.5, 0.3, 0.6], hosts=36, cores=8, sync=mode == "sync",
                       compile_s={"ON_1": 30.0, "ON_2": 60.0})
    curve = LossCurve(b0=1 / 3000, b1=2.0, b2=0.3, staleness=0.02)
    # The drift measured on this machine (a 70-s LogR run at one setting: episodes of 3-10 s, about 4%): the paper's
    # cluster's is not known, and with none, short segments would time their settings better than any machine does.
    return Workload("PaperScaleLogR", 36, speed, curve, target_loss=0.36, model_bytes=100e6, start_s=30.0,
                    drift=0.04, drift_period_s=5.0)


class SimulatedClock:
    """Seconds since the epoch, moved on by the simulation only."""

    def __init__(self, start: float):
        self.now = start

    def __call__(self) -> float:
        return self.now


@dataclass
class _SimulatedJob:
    """What the driver's parts read of a job."""

    name: str
    target_loss: float
    smoothing_window: int


class Simulation:
    """One simulated job of ``workload`` from ``setting``, recorded in ``repo``; :meth:`run` trains it.

    ``tuning`` (a :class:`~tfonline.tuner.Tuning`, or None for a fixed
    setting) tunes it with the real tuner.
    """

    def __init__(self, workload: Workload, repo: Repository, setting: dict[str, Any], *, tuning: Tuning | None,
                 seed: int = 0, technique: str = "online", max_seconds: float | None = None,
                 estimator: str = "hogwild"):
        self.workload, self.repo, self.tuning, self.seed = workload, repo, tuning, seed
        self.technique, self.max_seconds = technique, max_seconds
        self.rng = np.random.default_rng(seed)
        self.job = _SimulatedJob(workload.name, workload.target_loss, workload.smoothing_window)
        self.job_id = f"{workload.name}-sim-{uuid.uuid4().hex[:8]}"
        self.clock = SimulatedClock(time.time())
        self.started_at = self.clock.now
        self.recorder = Recorder(repo, self.job_id, clock=self.clock)
        self.space = workload.space(tuning.restrict if tuning is not None else None)
        self.state = TrainingState(self.job, self.recorder, self.space.start(setting), sync=workload.speed.sync,
                                   max_steps=None, patience=None)
        self.progress = Progress(self.job, self.state, self.recorder, get_estimator(estimator),
                                 lambda: self.state.setting["worker"], self.started_at,
                                 prior_for(repo, self.job_id, workload.name, workload.target_loss, estimator,
                                           workload.mode))
        self.estimator_name = estimator
        self.manager = None
        self._progress = 0.0  # the loss curve's progress so far
        self._next_estimate = self._trained_from = 0.0
        self._worker = 0
        self._drift_rng = np.random.default_rng([seed, 1])  # its own stream: a drift of 0 draws nothing
        self._slowdown, self._drift_until = 1.0, -math.inf

    def run(self) -> tuple[str, str]:
        """Trains to the end; returns the job's status and stop reason."""
        state, recorder = self.state, self.recorder
        recorder.setting(state.setting)
        recorder.job_start(name=self.job.name, script="(simulated)", mode=self.workload.mode,
                           target_loss=self.job.target_loss, max_steps=None, max_seconds=self.max_seconds,
                           started_at=self.started_at, node_count=self.workload.nodes,
                           knob_space=self.space.describe(), tf_version="simulated", seed=self.seed,
                           tuned=self.tuning is not None)
        status, reason = "failed", "error"
        try:
            if self.tuning is not None:
                tuning = self.tuning
                if tuning.estimator_factory is None:
                    tuning = replace(tuning, estimator_factory=lambda: get_estimator(self.estimator_name))
                self.manager = tuning.manager(self.space, state.setting, self.job, self.repo, self.seed,
                                              self.technique)
                self.progress.inform(self.manager)
                state.phase = self.manager.phase
                recorder.phase(self.manager.phase, 1)
            self.clock.now += self.workload.start_s + self.workload.compile_s(state.setting)
            self._trained_from = self._next_estimate = self.clock.now
            state.begin()
            try:
                self._train()
            except Stop as stop:
                status, reason = stop.status, stop.reason
            state.end()
        except KeyboardInterrupt:
            status, reason = "interrupted", "interrupted (SIGINT/SIGTERM)"
            raise
        except BaseException as e:  # recorded as the driver records it; the caller sees the error
            status, reason = "failed", f"{type(e).__name__}: {e}"
            raise
        finally:
            recorder.job_end(status=status, reason=reason, started_at=self.started_at, iterations=state.step,
                             final_loss=state.final_loss, first_iteration_at=state.first_iteration_at,
                             tuning_overhead_s=self.manager.overhead_s if self.manager is not None else None)
        return status, reason

    def _train(self) -> None:
        """Segments, decisions and switches until a :class:`Stop`."""
        state, manager = self.state, self.manager
        if manager is None:
            self._iterations(math.inf)  # until a Stop
        while True:
            state.goal = manager.segment_length() + state.warmup
            self._iterations(state.goal, manager.segment_seconds())
            run, segment = state.hand_over()
            old_phase = manager.phase
            decision = manager.on_segment_end(run)
            triple = manager.triples[-1]
            # The tuner decides beside the training (the driver's background thread): its time passes. A job
            # that ends meanwhile records the decision all the same, a switch not applied, as the driver does.
            first = None
            try:
                self._iterations(1, decision.overhead_s)
            except Stop:
                first = "the job ended first"
                raise
            finally:
                decision = record_decision(self.recorder, state, manager, decision, triple, segment, old_phase,
                                           self.estimator_name, first)
            if decision.switch:
                self._switch(decision)

    def _iterations(self, count: float, seconds: float = 0.0) -> None:
        """Trains until the segment has ``count`` iterations and lasted ``seconds``; raises :class:`Stop`."""
        state, workload = self.state, self.workload
        setting = state.setting
        workers = setting["worker"]
        while len(state.points) < count or self.clock.now - state.segment_started < seconds:
            n = CHUNK if count == math.inf else max(1, min(CHUNK, int(count - len(state.points))))
            gaps, step_times, losses, self._progress = workload.draw(setting, n, self._progress, self.rng)
            for i in range(n):  # a Stop mid-chunk ends the job: the progress drawn ahead no longer matters
                if workload.drift and self.clock.now >= self._drift_until:  # lognormal, of mean 1
                    z = self._drift_rng.standard_normal()
                    self._slowdown = math.exp(workload.drift * z - workload.drift ** 2 / 2)
                    self._drift_until = self.clock.now + workload.drift_period_s
                self.clock.now += gaps[i] * self._slowdown
                self._worker = (self._worker + 1) % workers
                state.record(None if workload.speed.sync else self._worker, float(step_times[i] * self._slowdown),
                             float(losses[i]), state.generation)
                if self.clock.now >= self._next_estimate:
                    self._next_estimate = self.clock.now + max(1.0, (self.clock.now - self._trained_from)
                                                               / ESTIMATES_PER_E)
                    self.progress.estimate()
                if self.max_seconds is not None and self.clock.now - self.started_at >= self.max_seconds:
                    raise Stop("stopped", f"max_seconds ({self.max_seconds:g} s) reached")

    def _switch(self, decision) -> None:
        """A decision's switch, by its plan, at its modelled cost: the workers' time passes, then the new
        setting trains."""
        state, old, new = self.state, self.state.setting, decision.candidate
        cost, moved = self.workload.switch_cost(decision)
        step = state.step
        self.clock.now += cost
        state.publish(new, [None] * new["worker"], None, observe=False, then=_nothing)
        self.recorder.reconfiguration(step=step, old=old, new=new, plan=decision.plan, bytes_moved=moved,
                                      cost_s=cost, iterations_during=0)
        self.manager.record_cost(decision.parts, cost)


def _nothing() -> None:
    pass


@dataclass(frozen=True)
class FixedOutcome:
    """What one fixed setting's simulated job did."""

    setting: dict[str, Any]
    status: str
    iterations: int
    completion_s: float
    per_iteration_s: float
    final_loss: float


def fixed_runs(workload: Workload, settings: Sequence[dict[str, Any]], seed: int = 0,
               max_seconds: float | None = None) -> list[FixedOutcome]:
    """Each setting's job, run to the target (or ``max_seconds``) in arrays: the same models and the same
    stopping rule (the driver's smoothed loss, :class:`~tfonline._state.SmoothedLoss`), no repository rows."""
    from scipy.signal import lfilter

    rng = np.random.default_rng(seed)
    window = workload.smoothing_window
    alpha = 2.0 / (window + 1)
    outcomes = []
    for setting in settings:
        per = workload.curve.progress_per_iteration(setting, workload.speed.sync)
        if workload.curve.staleness_growth:  # the slowest pace, at the floor
            per = workload.curve.progress_per_iteration(setting, workload.speed.sync, math.inf)
        start = workload.start_s + workload.compile_s(setting)
        need = workload.curve.progress_to(workload.target_loss * 0.999) / per
        budget = math.inf if max_seconds is None else max(0.0, max_seconds - start) / workload.speed.iteration_s(setting)
        n = int(min(need * 1.2 + 4 * window, budget * 1.2 + 1, MAX_FIXED_ITERATIONS))
        gaps, losses = _drawn(workload, setting, n, rng)
        walls = start + np.cumsum(gaps)
        smoothed = lfilter([alpha], [1, -(1 - alpha)], losses) / (1 - (1 - alpha) ** np.arange(1, n + 1))
        done = np.flatnonzero((smoothed <= workload.target_loss) & (np.arange(1, n + 1) >= window))
        limit = np.flatnonzero(walls >= max_seconds) if max_seconds is not None else np.array([], int)
        if done.size and (not limit.size or done[0] <= limit[0]):
            end, status = int(done[0]), "converged"
        elif limit.size:
            end, status = int(limit[0]), "stopped"
        else:
            end, status = n - 1, "stopped"
        outcomes.append(FixedOutcome(dict(setting), status, end + 1, float(walls[end]),
                                     workload.speed.iteration_s(setting),
                                     float(smoothed[end])))
    return outcomes


def _drawn(workload: Workload, setting: dict[str, Any], n: int, rng: np.random.Generator):
    """``n`` iterations of a fixed setting from the start: their gaps and losses (in chunks of :data:`CHUNK` when
    the pace changes with the progress)."""
    if not workload.curve.staleness_growth:
        gaps, _, losses, _ = workload.draw(setting, n, 0.0, rng)
        return gaps, losses
    gaps, losses, progress = [], [], 0.0
    for size in [CHUNK] * (n // CHUNK) + [n % CHUNK]:
        if size:
            g, _, x, progress = workload.draw(setting, size, progress, rng)
            gaps.append(g)
            losses.append(x)
    return np.concatenate(gaps), np.concatenate(losses)


class Segments:
    """The modelled job segment by segment, for a tuner alone: no driver, no repository.

    Each :meth:`run` trains one segment of a setting and returns the
    :class:`~tfonline.tuner.manager.SegmentRun` a driver would hand the
    tuner; :meth:`drive` runs a tuner's decisions, a switch at its modelled
    cost (``switch_cost_s`` when given, the same for every switch). The
    tuner's tests run it on a surface whose optimum they know.
    """

    def __init__(self, workload: Workload, seed: int, switch_cost_s: float | None = None):
        self.workload, self.switch_cost_s = workload, switch_cost_s
        self.rng = np.random.default_rng(seed)
        self.step, self.progress, self.clock = 0, 0.0, 0.0
        self.smoothed = SmoothedLoss(workload.smoothing_window)

    def run(self, setting: dict[str, Any], iterations: int) -> SegmentRun:
        before = self.smoothed.value if self.smoothed.count else None
        gaps, _, losses, self.progress = self.workload.draw(setting, iterations, self.progress, self.rng)
        steps = self.step + np.arange(1, iterations + 1, dtype=float)
        walls = self.clock + np.cumsum(gaps)
        self.step, self.clock = self.step + iterations, float(walls[-1])
        for loss in losses:
            self.smoothed.add(float(loss))
        return SegmentRun(dict(setting), steps, losses, walls, float(losses[0]) if before is None else before,
                          self.smoothed.value)

    def switch_cost(self, decision) -> float:
        """A decision's switch, at its modelled cost (``switch_cost_s`` when given)."""
        if self.switch_cost_s is not None:
            return self.switch_cost_s
        return self.workload.switch_cost(decision)[0]

    def drive(self, manager, decisions: int, timed: bool = False) -> list:
        """Runs ``decisions`` of ``manager``'s segments, switching as it decides; returns its decisions. A
        segment runs ``segment_length()`` iterations; ``timed``: and lasts ``segment_seconds()`` too, at the
        setting's modelled pace, as the driver runs it."""
        made = []
        for _ in range(decisions):
            iterations = manager.segment_length()
            if timed:
                pace = self.workload.speed.iteration_s(manager.current)
                iterations = max(iterations, math.ceil(manager.segment_seconds() / pace))
            decision = manager.on_segment_end(self.run(manager.current, iterations))
            made.append(decision)
            if decision.switch:
                cost = self.switch_cost(decision)
                self.clock += cost
                manager.record_cost(decision.parts, cost)
        return made
