"""The simulator's models of a cluster and a job: speed, convergence and switch costs.

**Speed** (:class:`SpeedModel`, from :mod:`tfonline.tuner.speed`, which the tuner shares). One worker's step takes

    T(s) = θ·φ(s),  θ ≥ 0,

with the features φ of :data:`FEATURES`: Optimus's terms (seed 003, eq. 3:
``θ0 + θ1·w/p + θ2·w + θ3·p``), then the thread pools (compute spread over
``intra`` and ``inter`` threads: ``1/intra``, ``1/inter``), the crowding of a
host's cores (workers on one host asking for more threads than it has), and
XLA (one term per ``global_jit_level`` that is on, per worker sharing a
host). Asynchronous workers step side by side, so the job does ``w / T``
iterations a second; a synchronous step is one iteration. Switching to a
setting with XLA on pays its compilation once (``compile_s``). The other
session knobs (constant folding, CSE, inlining, shape inference, pruning,
bfloat16 transfers) are not modelled: on this machine's LogR runs, the fit's
errors depend on them by a few percent at most, about its noise (NOTES.md).

**Convergence** (:class:`LossCurve`). Optimus's loss curve (seed 003,
§3.1), ``l(k) = 1/(β0·k + β1) + β2``, in *progress* ``k``: an asynchronous
iteration makes ``1 / (1 + staleness·(w − 1))`` of progress (more workers,
staler gradients), a synchronous one ``1 + sync_gain·(w − 1)`` (a larger
batch). With ``staleness_growth`` > 0, staleness grows as the loss nears
its floor, ``staleness·(1 + staleness_growth·f)`` with ``f`` the share of
the way from the first loss to the floor covered: stale gradients cost more
when the true gradient is small, so the best number of workers can change
during a job. Each loss has multiplicative noise.

**Switch costs** (:class:`SwitchCosts`). Each technique's part of a
:class:`~tfonline.reconfig.Plan` costs its seconds, moved bytes cost their
transfer, and XLA compiles at the first step after any switch to a setting
that has it on (as on TensorFlow, see :func:`tfonline.reconfig.switch_parts`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Mapping

import numpy as np

from tfonline.exceptions import ConfigurationError
from tfonline.reconfig.plan import THREAD_KNOBS, Plan
from tfonline.tuner.speed import FEATURES, SpeedModel, features  # noqa: F401 (re-exported: the simulator's speed)


@dataclass
class LossCurve:
    """The loss after progress ``k``: ``1/(b0·k + b1) + b2`` (see the module's docstring)."""

    b0: float
    b1: float
    b2: float
    staleness: float = 0.05
    sync_gain: float = 0.5
    noise: float = 0.02
    staleness_growth: float = 0.0

    def __post_init__(self):
        if not (self.b0 > 0 and self.b1 > 0 and self.b2 >= 0 and self.staleness >= 0 and self.noise >= 0
                and self.staleness_growth >= 0):
            raise ConfigurationError(f"a loss curve needs b0 > 0, b1 > 0 and b2, staleness, noise, "
                                     f"staleness_growth >= 0, got {self}")

    def loss(self, progress: np.ndarray | float) -> np.ndarray | float:
        return 1.0 / (self.b0 * progress + self.b1) + self.b2

    def progress_per_iteration(self, setting: Mapping[str, Any], sync: bool, progress: float = 0.0) -> float:
        w = setting["worker"]
        if sync:
            return 1.0 + self.sync_gain * (w - 1)
        covered = 1.0 if math.isinf(progress) else self.b0 * progress / (self.b0 * progress + self.b1)
        return 1.0 / (1.0 + self.staleness * (1.0 + self.staleness_growth * covered) * (w - 1))

    def progress_to(self, loss: float) -> float:
        """The progress at which the noiseless loss reaches ``loss`` (inf when it never does)."""
        if loss <= self.b2:
            return math.inf
        return max(0.0, (1.0 / (loss - self.b2) - self.b1) / self.b0)


@dataclass
class SwitchCosts:
    """Seconds a switch costs, by the parts of its plan's technique, plus moved bytes at ``bandwidth_bps``.

    Measured on this machine (``benchmarks/reconfig_sequence.py``, NOTES.md):
    SSR about 0.1 s, ODMR 0.2-0.55 s, TDR about 0.2 s, a thread change
    0.6-0.8 s, a checkpoint-restart about 1 s plus a node restart's 1 s.
    """

    ssr: float = 0.1
    odmr: float = 0.3
    tdr: float = 0.2
    threads: float = 0.7
    restart: float = 0.8
    checkpoint: float = 1.0
    node_start: float = 1.0
    bandwidth_bps: float = 1e9 / 8

    def cost_s(self, plan: Plan, model_bytes: float, compile_s: float = 0.0) -> tuple[float, int]:
        """The switch's cost and the bytes it moves, for a model of ``model_bytes``."""
        if plan.technique == "none":
            return 0.0, 0
        threads = any(name in THREAD_KNOBS for name in plan.changed)
        if plan.technique == "checkpoint":  # saved, every node restarted, restored
            return self.checkpoint + self.node_start + 2 * model_bytes / self.bandwidth_bps + compile_s, 0
        if plan.technique == "restart":  # read, new sessions, restored
            moved = int(2 * model_bytes)
            return self.restart + (self.node_start if threads else 0.0) + moved / self.bandwidth_bps + compile_s, moved
        parts = plan.technique.split("+")
        cost = sum(getattr(self, part) for part in parts) + (self.threads if threads else 0.0)
        moved = int(model_bytes / 2) if "odmr" in parts else 0  # about half the partitions move to new nodes
        return cost + moved / self.bandwidth_bps + compile_s, moved

    def to_dict(self) -> dict[str, float]:
        return asdict(self)
