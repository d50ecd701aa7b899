"""The speed model: seconds per iteration of a setting, ``θ·φ(setting)``, Optimus's f(p, w) and more.

One worker's step takes ``T(s) = θ·φ(s)``, θ ≥ 0, with the features φ of
:data:`FEATURES`: Optimus's terms (seed 003, eq. 3: ``θ0 + θ1·w/p + θ2·w +
θ3·p``), the thread pools (``1/intra``, ``1/inter``), the crowding of a
host's cores, and XLA (a term per ``global_jit_level`` that is on, per
worker sharing a host). Asynchronous workers step side by side, so the job
does ``w / T`` iterations a second; a synchronous step is one iteration.

The simulator runs jobs on it (:mod:`tfonline.simulator.model`),
``tfonline calibrate`` fits it to a repository's fixed runs, and the tuner
fits it to every job's observations as the GP's first guess
(:class:`SpeedPrior`, :meth:`tfonline.tuner._gpyopt.GPOptimizer.prior`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from tfonline.exceptions import ConfigurationError


# The speed model's features, in θ's order.
FEATURES = ("base", "w/p", "w", "p", "1/intra", "1/inter", "crowding", "jit:ON_1", "jit:ON_2")


def features(setting: Mapping[str, Any], hosts: int, cores: int) -> np.ndarray:
    """φ(setting) on ``hosts`` machines of ``cores`` cores each (see :data:`FEATURES`).

    The nodes are spread over the hosts, workers first; crowding is how far
    the busiest host's workers ask for more intra-op threads than it has
    cores (0 when they fit). XLA's term counts the workers that share the
    busiest host: its extra work per step competes for the same cores.
    """
    p, w = setting["ps"], setting["worker"]
    intra, inter = setting["intra_op_parallelism_threads"], setting["inter_op_parallelism_threads"]
    jit = setting.get("global_jit_level", "OFF")
    workers_per_host = math.ceil(w / hosts)
    crowding = max(0.0, workers_per_host * intra / cores - 1.0)
    return np.array([1.0, w / p, w, p, 1.0 / intra, 1.0 / inter, crowding,
                     workers_per_host * (jit == "ON_1"), workers_per_host * (jit == "ON_2")])


@dataclass
class SpeedModel:
    """Seconds per worker step, ``theta · features(setting)``, on ``hosts`` machines of ``cores`` cores.

    ``compile_s`` maps a ``global_jit_level`` to the seconds XLA's
    compilation costs at the first step on it.
    """

    theta: Sequence[float]
    hosts: int
    cores: int
    sync: bool = False
    compile_s: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self):
        self.theta = [float(t) for t in self.theta]
        if len(self.theta) != len(FEATURES) or any(not t >= 0 for t in self.theta):
            raise ConfigurationError(f"theta must be {len(FEATURES)} numbers >= 0 ({', '.join(FEATURES)}), "
                                     f"got {self.theta!r}")

    def step_s(self, setting: Mapping[str, Any]) -> float:
        """One worker's step (a synchronous step: every worker's)."""
        return float(np.dot(self.theta, features(setting, self.hosts, self.cores)))

    def iteration_s(self, setting: Mapping[str, Any]) -> float:
        """The job's time per iteration: a step, shared by the workers that take them side by side."""
        step = self.step_s(setting)
        return step if self.sync else step / setting["worker"]

    @classmethod
    def fit(cls, runs: Sequence[tuple[Mapping[str, Any], float]], hosts: int, cores: int, sync: bool = False,
            compile_s: Mapping[str, float] | None = None) -> "SpeedModel":
        """The model that fits ``runs``, ``(setting, seconds per iteration)``, by non-negative least squares.

        Each run weighs by its relative error (the fit minimises squared
        relative errors), so fast settings count as much as slow ones.
        """
        from scipy.optimize import nnls

        if len(runs) < 2:
            raise ConfigurationError(f"a speed model needs at least 2 runs to fit, got {len(runs)}")
        x = np.array([features(s, hosts, cores) for s, _ in runs])
        steps = np.array([t if sync else t * s["worker"] for s, t in runs])
        theta, _ = nnls(x / steps[:, None], np.ones(len(runs)))
        return cls(theta, hosts, cores, sync, dict(compile_s or {}))

    def to_dict(self) -> dict[str, Any]:
        return {"theta": dict(zip(FEATURES, self.theta)), "hosts": self.hosts, "cores": self.cores,
                "sync": self.sync, "compile_s": dict(self.compile_s)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "SpeedModel":
        theta = d["theta"]
        return cls([theta[f] for f in FEATURES], d["hosts"], d["cores"], d.get("sync", False),
                   d.get("compile_s", {}))


# The knobs the speed model reads.
MODEL_KNOBS = ("ps", "worker", "intra_op_parallelism_threads", "inter_op_parallelism_threads", "global_jit_level")
# The tuner's first guess needs this many distinct settings (of any job) to be fitted, and is used only when,
# left out one setting at a time, it predicts them with at most this share of their variance left.
PRIOR_MIN_SETTINGS = 6
PRIOR_MAX_UNEXPLAINED = 0.5
_SCALE_ROUNDS = 4


@dataclass(frozen=True)
class SpeedPrior:
    """The GP's first guess of a setting's log time per iteration: the speed model's shape, fitted to the
    observations of every job the tuner has (each job at its own scale, since a similar workload is faster
    or slower as a whole), on one host of ``cores`` cores.

    The GP then learns what the model misses (its output is ``log t`` less the guess at the job's own
    scale): a setting never tried starts from the model's guess at this job's level instead of the mean of
    everything seen. Whether the job is synchronous is not known to the tuner; both forms are fitted and the
    better kept.
    """

    model: SpeedModel
    scales: Mapping[Any, float]  # each job's log scale; this job's is under "" (else the median is used)

    def log_seconds(self, settings: Sequence[Mapping[str, Any]], jobs: Sequence[Any] | None = None) -> np.ndarray:
        """The guess of log time per iteration of ``settings``, each at its job's scale (default: this job's)."""
        own = self.scales.get("", float(np.median(list(self.scales.values()))))
        scale = [own] * len(settings) if jobs is None else [self.scales.get(job, own) for job in jobs]
        return np.log(np.maximum([self.model.iteration_s(s) for s in settings], 1e-12)) + np.asarray(scale)

    @classmethod
    def fit(cls, settings: Sequence[Mapping[str, Any]], seconds: Sequence[float], jobs: Sequence[Any],
            cores: int) -> "SpeedPrior | None":
        """The prior from ``settings`` timed at ``seconds`` per iteration by ``jobs`` (any hashable per job), or
        None when there are too few distinct settings or the model does not predict the ones left out."""
        keys = [tuple(s[name] for name in MODEL_KNOBS) for s in settings]
        if len(set(keys)) < PRIOR_MIN_SETTINGS:
            return None
        x = np.array([features(s, 1, cores) for s in settings])
        workers = np.array([s["worker"] for s in settings], dtype=float)
        y = np.log(np.asarray(seconds, dtype=float))
        groups = {job: i for i, job in enumerate(dict.fromkeys(jobs))}
        g = np.array([groups[job] for job in jobs])
        spread = float(np.mean((y - _job_means(y, g)[g]) ** 2))
        fits = [(_left_out_error(x, workers, y, g, keys, sync), sync) for sync in (False, True)]
        unexplained, sync = min(fits, key=lambda fit: fit[0])
        if not unexplained <= PRIOR_MAX_UNEXPLAINED * spread:
            return None
        theta, predicted = _fit_scaled(x, workers, y, g, sync)
        scales = _job_means(y - predicted, g)
        return cls(SpeedModel(theta, 1, cores, sync), {job: float(scales[i]) for job, i in groups.items()})


def _job_means(values: np.ndarray, g: np.ndarray) -> np.ndarray:
    """The mean of ``values`` per job (0 for a job with none), indexed by job."""
    n = int(g.max()) + 1 if len(g) else 0
    return np.bincount(g, weights=values, minlength=n) / np.maximum(np.bincount(g, minlength=n), 1)


def _fit_scaled(x: np.ndarray, workers: np.ndarray, y: np.ndarray, g: np.ndarray, sync: bool):
    """θ fitted to log times per iteration ``y`` (features ``x``) of jobs ``g``, each job at its own scale:
    non-negative least squares of relative errors for θ, as :meth:`SpeedModel.fit`, alternating with the
    scales' closed form. Returns θ and its log time per iteration at each row, before the job's scale."""
    from scipy.optimize import nnls

    log_scale = np.zeros(int(g.max()) + 1)
    per_step = 0.0 if sync else np.log(workers)  # an async job's iteration is a step shared by its workers
    for _ in range(_SCALE_ROUNDS):
        steps = np.exp(y - log_scale[g] + per_step)
        theta, _ = nnls(x / steps[:, None], np.ones(len(y)))
        predicted = np.log(np.maximum(x @ theta, 1e-12)) - per_step
        log_scale = _job_means(y - predicted, g)
    return theta, predicted


def _left_out_error(x, workers, y, g, keys, sync: bool) -> float:
    """The mean squared error of log time at each distinct setting, predicted by the model fitted without it,
    with each job's scale from its other settings (a job seen only there is not counted)."""
    keys = np.array([hash(k) for k in keys])
    errors = []
    for key in np.unique(keys):
        kept = keys != key
        theta, predicted = _fit_scaled(x[kept], workers[kept], y[kept], g[kept], sync)
        per_step = 0.0 if sync else np.log(workers[~kept])
        left_out = np.log(np.maximum(x[~kept] @ theta, 1e-12)) - per_step
        scale = _job_means(y[kept] - predicted, g[kept])
        for j in np.unique(g[~kept]):
            if j < len(scale) and np.any(g[kept] == j):
                errors.extend((y[~kept][g[~kept] == j] - left_out[g[~kept] == j] - scale[j]) ** 2)
    return float(np.mean(errors)) if errors else math.inf
