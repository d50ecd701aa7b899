"""The paper's comparison (its Fig. 5) on a modelled cluster: ``tfonline simulate``.

R random fixed settings run to the target (:func:`fixed_runs`) give Worst,
Average and Best; the default setting's fixed run is given too; tfonline,
from the default setting, tunes with the real tuner (:class:`Simulation`)
and is recorded in the repository, where ``tfonline report`` reads it.
"""

from __future__ import annotations

import random
import time
from statistics import mean
from typing import Any, Sequence

from tfonline.repository import Repository
from tfonline.setting import short_form
from tfonline.simulator.run import Simulation, Workload, fixed_runs
from tfonline.tuner import Tuning


def evaluate(workload: Workload, db: str, *, random_settings: int = 100, seeds: Sequence[int] = (0,),
             min_segment_s: float = 2.0) -> dict[str, Any]:
    """Runs the comparison; the tuned jobs are written to the repository ``db``."""
    began = time.perf_counter()
    space = workload.space()
    rng = random.Random(seeds[0])
    settings = [space.sample(rng) for _ in range(random_settings)]
    fixed = fixed_runs(workload, settings, seed=seeds[0])
    default = fixed_runs(workload, [workload.default_setting()], seed=seeds[0])[0]
    fixed_s = time.perf_counter() - began
    tuned = []
    repo = Repository(db)
    try:
        for seed in seeds:
            started = time.perf_counter()
            sim = Simulation(workload, repo, workload.default_setting(), seed=seed,
                             tuning=Tuning(min_segment_s=min_segment_s, resume=False))
            status, reason = sim.run()
            final = sim.state.setting
            tuned.append({"job_id": sim.job_id, "seed": seed, "status": status, "reason": reason,
                          "completion_s": sim.clock.now - sim.started_at, "iterations": sim.state.step,
                          "final_setting": short_form(final), "real_s": time.perf_counter() - started,
                          "tuning_overhead_s": sim.manager.overhead_s if sim.manager is not None else None})
    finally:
        repo.close()
    times = sorted(f.completion_s for f in fixed)
    tuned_s = mean(t["completion_s"] for t in tuned)
    best = min(fixed, key=lambda f: f.completion_s)
    return {
        "workload": workload.name, "nodes": workload.nodes, "mode": workload.mode, "db": db,
        "random_settings": random_settings, "converged": sum(f.status == "converged" for f in fixed),
        "worst_s": times[-1], "average_s": mean(times), "best_s": times[0], "best_setting": short_form(best.setting),
        "default_s": default.completion_s, "default_setting": short_form(default.setting),
        "tuned": tuned, "tuned_s": tuned_s,
        "average_over_tuned": mean(times) / tuned_s, "worst_over_tuned": times[-1] / tuned_s,
        "tuned_over_best": tuned_s / times[0], "default_over_tuned": default.completion_s / tuned_s,
        "fixed_runs_real_s": fixed_s, "real_s": time.perf_counter() - began,
        "fixed": [{"setting": short_form(f.setting), "status": f.status, "iterations": f.iterations,
                   "completion_s": f.completion_s, "per_iteration_s": f.per_iteration_s} for f in fixed],
    }


def duration(seconds: float) -> str:
    """``12.3 s``, ``45.6 min`` or ``7.89 h``."""
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


def evaluation_text(r: dict[str, Any]) -> str:
    lines = [
        f"{r['workload']} ({r['mode']}) on {r['nodes']} simulated nodes; {r['random_settings']} random fixed "
        f"settings ({r['converged']} converged)",
        f"  fixed:    worst {duration(r['worst_s'])}, average {duration(r['average_s'])}, best {duration(r['best_s'])} "
        f"({r['best_setting']})",
        f"  default:  {duration(r['default_s'])} ({r['default_setting']})",
    ]
    for t in r["tuned"]:
        lines.append(f"  tfonline: {duration(t['completion_s'])}, {t['status']}, {t['iterations']} iterations, "
                     f"ends on {t['final_setting']} (seed {t['seed']}, job {t['job_id']}, "
                     f"{t['real_s']:.1f} s to simulate)")
    lines += [
        f"  average / tfonline {r['average_over_tuned']:.2f}x, worst / tfonline {r['worst_over_tuned']:.2f}x, "
        f"tfonline / best {r['tuned_over_best']:.2f}x, default / tfonline {r['default_over_tuned']:.2f}x "
        f"(paper: average 1.4-2.5x, worst 6-18x, best 1.3-2.3x slower)",
        f"  simulated in {r['real_s']:.1f} s ({r['fixed_runs_real_s']:.1f} s for the fixed settings); "
        f"the tuned jobs are in {r['db']} (tfonline report {r['db']})",
    ]
    return "\n".join(lines)
