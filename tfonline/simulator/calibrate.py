"""The simulator's models fitted to real runs: ``tfonline calibrate``.

A *fixed-setting run* is a finished, untuned, real job whose iterations all
ran on one setting. From each, the calibration takes the setting, its time
per iteration (:func:`tfonline.timing.per_iteration_time`, after a tenth of
the run as warm-up), its time to the first iteration, and, when it
converged, its iterations. It fits:

- the speed model (:meth:`SpeedModel.fit`) on all runs but a held-out
  share, and reports its error on the held-out runs it never saw;
- XLA's compile time: the median extra time to the first iteration of runs
  with XLA on, per level;
- staleness: iterations to the target against workers, ``N = K·(1 +
  σ·(w − 1))`` (asynchronous runs);
- the loss curve: Optimus's form over the converged runs' progress;
- switch costs: the median measured cost per technique in the repository's
  reconfigurations, where there are any.

The result is a JSON model that ``tfonline simulate --model`` runs.
"""

from __future__ import annotations

import json
import math
import os
import random
from collections import Counter
from dataclasses import asdict, dataclass
from statistics import median
from typing import Any

import numpy as np

from tfonline.exceptions import ConfigurationError
from tfonline.repository import Repository
from tfonline.setting import short_form
from tfonline.simulator.model import LossCurve, SpeedModel, SwitchCosts
from tfonline.simulator.run import Workload
from tfonline.timing import per_iteration_time

MIN_ITERATIONS = 30  # a run shorter than this times nothing


@dataclass(frozen=True)
class FixedRun:
    """What one real fixed-setting run measured."""

    job_id: str
    name: str
    mode: str
    nodes: int
    setting: dict[str, Any]
    iteration_s: float
    first_iteration_s: float
    iterations: int
    converged: bool
    target_loss: float
    losses: tuple[float, ...]  # every iteration's loss, in order (thinned to at most 400)


def fixed_runs_in(repo: Repository, name: str | None = None) -> list[FixedRun]:
    """The repository's real fixed-setting runs (of job ``name``, when given), oldest first."""
    runs = []
    for job in repo.jobs(name):
        if job["tuned"] or job["tf_version"] == "simulated" or job["status"] not in ("converged", "stopped"):
            continue
        rows = list(repo.rows("select setting_id, loss, wall_time from iterations where job_id = ? order by step",
                              (job["id"],)))
        if len(rows) < MIN_ITERATIONS or len({r["setting_id"] for r in rows}) != 1:
            continue
        knobs = next(repo.rows("select knobs from settings where id = ?", (rows[0]["setting_id"],)))["knobs"]
        pace = per_iteration_time(np.array([r["wall_time"] for r in rows]), len(rows) // 10)
        if pace is None or job["first_iteration_at"] is None:
            continue
        losses = [r["loss"] for r in rows]
        step = max(1, len(losses) // 400)
        runs.append(FixedRun(job["id"], job["name"], job["mode"], job["node_count"], json.loads(knobs), pace,
                             job["first_iteration_at"] - job["started_at"], len(rows),
                             job["status"] == "converged", job["target_loss"], tuple(losses[::step])))
    return runs[::-1]  # repo.jobs() lists the newest first


@dataclass
class Calibration:
    """A fitted model, and how well it predicts runs it was not fitted on."""

    workload: Workload
    fitted: list[FixedRun]
    held_out: list[FixedRun]

    def errors(self, runs: list[FixedRun]) -> list[float]:
        """Each run's relative error of the predicted time per iteration."""
        speed = self.workload.speed
        return [(speed.iteration_s(r.setting) - r.iteration_s) / r.iteration_s for r in runs]

    def to_dict(self) -> dict[str, Any]:
        w = self.workload
        held = self.errors(self.held_out)
        return {
            "name": w.name, "nodes": w.nodes, "mode": w.mode, "target_loss": w.target_loss,
            "model_bytes": w.model_bytes, "start_s": w.start_s, "smoothing_window": w.smoothing_window,
            "speed": w.speed.to_dict(),
            "curve": asdict(w.curve),
            "switches": w.switches.to_dict(),
            "fitted_runs": [r.job_id for r in self.fitted], "held_out_runs": [r.job_id for r in self.held_out],
            "fit_error": _summary(self.errors(self.fitted)), "held_out_error": _summary(held),
        }

    def text(self) -> str:
        lines = [f"{self.workload.name}: speed model fitted on {len(self.fitted)} runs, "
                 f"checked on {len(self.held_out)} held out", "",
                 f"  {'setting':52} {'measured s/it':>14} {'predicted':>10} {'error':>7}"]
        for label, runs in (("fitted", self.fitted), ("held out", self.held_out)):
            lines.append(f"  {label}:")
            for r, e in zip(runs, self.errors(runs)):
                lines.append(f"  {short_form(r.setting):52} {r.iteration_s:14.5f} "
                             f"{self.workload.speed.iteration_s(r.setting):10.5f} {e:+7.1%}")
        fit, held = _summary(self.errors(self.fitted)), _summary(self.errors(self.held_out))
        lines += ["", f"  error, fitted runs:   median {fit['median_abs']:.1%}, mean {fit['mean_abs']:.1%}, "
                      f"worst {fit['max_abs']:.1%}",
                  f"  error, held-out runs: median {held['median_abs']:.1%}, mean {held['mean_abs']:.1%}, "
                  f"worst {held['max_abs']:.1%}"]
        c, s = self.workload.curve, self.workload.speed
        lines.append(f"  staleness {c.staleness:.3f}; loss curve 1/({c.b0:.3g}·k + {c.b1:.3g}) + {c.b2:.3g}; "
                     f"XLA compile {', '.join(f'{k} {v:.1f} s' for k, v in s.compile_s.items()) or 'not measured'}")
        return "\n".join(lines)


def _summary(errors: list[float]) -> dict[str, float]:
    if not errors:
        return {"median_abs": math.nan, "mean_abs": math.nan, "max_abs": math.nan}
    a = [abs(e) for e in errors]
    return {"median_abs": float(median(a)), "mean_abs": float(np.mean(a)), "max_abs": float(max(a))}


def calibrate(repo: Repository, name: str | None = None, *, hosts: int = 1, cores: int | None = None,
              holdout: float = 0.25, seed: int = 0) -> Calibration:
    """Fits a :class:`Workload` to the fixed-setting runs of job ``name`` (the job with most runs when None)."""
    runs = fixed_runs_in(repo, name)
    if name is None and runs:
        name = Counter(r.name for r in runs).most_common(1)[0][0]
        runs = [r for r in runs if r.name == name]
    modes = {r.mode for r in runs}
    if len(modes) > 1:
        raise ConfigurationError(f"calibrate takes the runs of one mode, got {sorted(modes)} for {name!r}")
    if not 0 <= holdout < 1:
        raise ConfigurationError(f"holdout must be a fraction in [0, 1), got {holdout!r}")
    order = list(range(len(runs)))
    random.Random(seed).shuffle(order)
    kept = max(0, min(len(runs) - 4, round(len(runs) * holdout)))
    held_out = [runs[i] for i in sorted(order[:kept])]
    fitted = [runs[i] for i in sorted(order[kept:])]
    if len(fitted) < 4:
        raise ConfigurationError(f"calibrate needs at least 4 fixed-setting runs (untuned, one setting, "
                                 f">= {MIN_ITERATIONS} iterations) of one job, got {len(fitted)}"
                                 + (f" of {name!r}" if name else ""))
    sync = modes == {"sync"}
    cores = cores or os.cpu_count() or 1
    off = [r.first_iteration_s for r in fitted if r.setting.get("global_jit_level", "OFF") == "OFF"]
    start_s = float(median(off)) if off else None  # to the first iteration, without XLA's compile
    speed = SpeedModel.fit([(r.setting, r.iteration_s) for r in fitted], hosts, cores, sync,
                           _compile_s(fitted, start_s))
    staleness = 0.0 if sync else _staleness(fitted)
    workload = Workload(name, max(r.nodes for r in runs), speed, _curve(fitted, staleness, sync),
                        target_loss=fitted[0].target_loss, model_bytes=0.0, switches=_switch_costs(repo),
                        start_s=start_s or 0.0)
    return Calibration(workload, fitted, held_out)


def _compile_s(runs: list[FixedRun], base: float | None) -> dict[str, float]:
    """XLA's compile time per level: extra seconds to the first iteration over ``base``, the median of runs with
    XLA off (None: no such run, nothing measured)."""
    if base is None:
        return {}
    out = {}
    for level in ("ON_1", "ON_2"):
        on = [r.first_iteration_s for r in runs if r.setting.get("global_jit_level") == level]
        if on:
            out[level] = max(0.0, median(on) - base)
    return out


def _staleness(runs: list[FixedRun]) -> float:
    """σ in ``N = K·(1 + σ·(w − 1))`` over the converged runs (0 when it cannot be told)."""
    done = [r for r in runs if r.converged]
    if len({r.setting["worker"] for r in done}) < 2:
        return 0.0
    slope, intercept = np.polyfit([r.setting["worker"] - 1 for r in done], [r.iterations for r in done], 1)
    return float(max(0.0, slope / intercept)) if intercept > 0 else 0.0


def _curve(runs: list[FixedRun], staleness: float, sync: bool) -> LossCurve:
    """Optimus's loss curve over the converged runs' losses, in progress."""
    from scipy.optimize import curve_fit

    progress, losses = [], []
    for r in runs:
        per = LossCurve(1, 1, 0, staleness).progress_per_iteration(r.setting, sync)
        step = max(1, r.iterations // len(r.losses))
        progress += [per * (1 + i * step) for i in range(len(r.losses))]
        losses += list(r.losses)
    x, y = np.array(progress), np.array(losses)
    try:
        (b0, b1, b2), _ = curve_fit(lambda k, b0, b1, b2: 1 / (b0 * k + b1) + b2, x, y,
                                    p0=(1e-3, 1.0, max(0.0, y.min() * 0.5)), bounds=([1e-9, 1e-6, 0], np.inf),
                                    maxfev=20000)
        noise = float(np.std(y / (1 / (b0 * x + b1) + b2) - 1))
    except (RuntimeError, ValueError):  # no fit: a flat curve to the runs' median loss
        b0, b1, b2, noise = 1e-9, 1.0 / max(float(np.median(y)), 1e-6), 0.0, 0.02
    return LossCurve(float(b0), float(b1), float(b2), staleness, noise=min(noise, 1.0))


def _switch_costs(repo: Repository) -> SwitchCosts:
    """The repository's median measured cost per technique part; the defaults where none was measured."""
    costs = SwitchCosts()
    measured: dict[str, list[float]] = {}
    for row in repo.rows("select technique, cost_s from reconfigurations where cost_s is not null"):
        parts = row["technique"].split("+")
        if len(parts) == 1:  # a part alone: its cost is the part's
            measured.setdefault(parts[0], []).append(row["cost_s"])
    for part, values in measured.items():
        if hasattr(costs, part):
            setattr(costs, part, float(median(values)))
    return costs


def load_workload(path: str) -> Workload:
    """A workload from ``tfonline calibrate --out``'s JSON file."""
    try:
        with open(path) as f:
            d = json.load(f)
        return Workload(d["name"], d["nodes"], SpeedModel.from_dict(d["speed"]), LossCurve(**d["curve"]),
                        target_loss=d["target_loss"], model_bytes=d["model_bytes"],
                        switches=SwitchCosts(**d["switches"]), start_s=d["start_s"],
                        smoothing_window=d["smoothing_window"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ConfigurationError(f"--model must be a JSON file written by tfonline calibrate --out, got {path!r}: "
                                 f"{type(e).__name__}: {e}") from None
