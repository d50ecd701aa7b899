"""Issue 19's benchmark: a model-selection sweep tuned with what the earlier jobs left, against the same
sweep with every job tuned from scratch, and against the best-known fixed setting.

    python benchmarks/sweep.py [--mode quick|smoke] [--workloads logr,cnn] [--keep DIR]

For each workload, one learning-rate sweep (LogR: 6 jobs, CNN: 4) runs three ways, each on one embedded
cluster started once for its jobs:

- ``inherited``: ``tfonline.sweep`` as a user runs it; each job's tuner starts from the earlier jobs'
  triples (the same workload signature: distance 0);
- ``scratch``: the same sweep with ``tuning={"resume": False}``: every job explores alone;
- ``fixed``: the second and the fourth job of the sweep at the best-known fixed setting: the best of
  the paper benchmark's fixed settings for that workload in its latest quick run
  (``benchmarks/results/*-quick*.json``, drawn again from its seed) and TensorFlow's default setting,
  the faster of the two counting.

Targets, printed beside the figures (issue 19): from the second job on, each inherited job at most
1.05x the best fixed setting; the inherited sweep's total at least 1.5x shorter than the scratch
sweep's. The sizes are the paper benchmark's (``benchmarks/workloads.py``); ``smoke`` runs the examples
as they are, two jobs each, to check the script. Results: ``benchmarks/results/<date>-sweep-<mode>.{json,md}``.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import workloads  # noqa: E402
from paper import DRAW_SEED, draw_settings  # noqa: E402
from rows import job_row  # noqa: E402

import tfonline  # noqa: E402
from tfonline.cluster import LocalCluster, default_node_count  # noqa: E402
from tfonline.setting import short_form  # noqa: E402
from tfonline.tuner.space import KnobSpace  # noqa: E402

GRIDS = {"logr": [0.35, 0.45, 0.55, 0.65, 0.75, 0.9], "cnn": [0.015, 0.02, 0.025, 0.03]}
MEASURED_FIXED = (1, 3)  # the jobs (0-based) run at the best-known fixed setting: the second and the fourth
TARGETS = {"inherited_over_best": 1.05, "scratch_over_inherited_total": 1.5}
CAP_S = {"quick": 300.0, "smoke": 120.0}


def best_known_fixed(name: str, nodes: int) -> dict | None:
    """The fastest converged fixed setting of the latest quick paper benchmark for ``name``, as knobs."""
    for path in sorted(glob.glob(os.path.join(HERE, "results", "*-quick*.json")), reverse=True):
        if "-sweep-" in os.path.basename(path):
            continue  # this benchmark's own results
        with open(path) as f:
            result = json.load(f)
        fixed = [r for r in result.get("workloads", {}).get(name, {}).get("fixed", []) if r["status"] == "converged"]
        if not fixed:
            continue
        best = min(fixed, key=lambda r: r["completion_time_s"])["setting"]
        space = KnobSpace(nodes, os.cpu_count() or 1)
        for offset in range(8):  # paper.py draws with its seed + the workload's place in its run
            for setting in draw_settings(space, result["fixed_settings"], result.get("draw_seed", DRAW_SEED) + offset):
                if short_form(setting) == best:
                    return setting
    return None


def job_class(name: str, mode: str):
    return (workloads.EXAMPLES if mode == "smoke" else workloads.SIZED)[name]


def _arm(name, mode, grid, cap, db, log, **options) -> dict:
    cls = job_class(name, mode)
    started = time.monotonic()
    with LocalCluster(default_node_count()) as cluster:
        results = tfonline.sweep(cls, {"learning_rate": grid}, db=db, cluster=cluster, quiet=True,
                                 max_seconds=cap, **options)
    rows = [job_row(r.db, r.job_id) for r in results]
    for lr, r in zip(grid, rows):
        log(f"    lr {lr:<6} {r['status']:<10} {r['completion_time_s']:7.1f} s {r['iterations']:>7} it  "
            f"{r['most_used_setting']}")
    return {"jobs": rows, "wall_s": time.monotonic() - started}


def _fixed(name, mode, grid, cap, db, log) -> dict:
    cls = job_class(name, mode)
    nodes = default_node_count()
    candidates = {"default": None, "best-known": best_known_fixed(name, nodes)}
    out = {}
    with LocalCluster(nodes) as cluster:
        for index in [i for i in MEASURED_FIXED if i < len(grid)]:
            runs = {}
            for label, setting in candidates.items():
                if label != "default" and setting is None:
                    continue
                job = cls()
                job.learning_rate = grid[index]
                runs[label] = job_row(db, job.run(setting=setting, db=db, cluster=cluster, quiet=True,
                                                        max_seconds=cap).job_id)
                log(f"    lr {grid[index]:<6} {label:<10} {runs[label]['status']:<10} "
                    f"{runs[label]['completion_time_s']:7.1f} s")
            out[index] = runs
    return out


def summarise(inherited: dict, scratch: dict, fixed: dict, cap: float) -> dict:
    def t(row):  # a job that did not converge counts at the cap
        return row["completion_time_s"] if row["status"] == "converged" else cap

    per_job = []
    for index, runs in fixed.items():
        best = min(t(r) for r in runs.values())
        per_job.append({"job": index, "inherited_s": t(inherited["jobs"][index]),
                        "scratch_s": t(scratch["jobs"][index]), "best_fixed_s": best,
                        "inherited_over_best": t(inherited["jobs"][index]) / best,
                        "scratch_over_best": t(scratch["jobs"][index]) / best})
    total_inherited = sum(t(r) for r in inherited["jobs"])
    total_scratch = sum(t(r) for r in scratch["jobs"])
    return {"per_job": per_job, "total_inherited_s": total_inherited, "total_scratch_s": total_scratch,
            "scratch_over_inherited_total": total_scratch / total_inherited}


def markdown(result: dict) -> str:
    lines = [f"# Sweep benchmark ({result['mode']}, {result['date']})", "",
             "Each workload's learning-rate sweep three ways on one embedded cluster each "
             "(benchmarks/sweep.py). Times are the jobs' completion times (a job that did not converge "
             f"counts at the cap, {result['cap_s']:.0f} s).", ""]
    for name, w in result["workloads"].items():
        s = w["summary"]
        lines += [f"## {name}", "", "| job | learning rate | inherited s | scratch s | best fixed s | "
                  "inherited / best | target | inherited, most used setting | scratch, most used setting |",
                  "|---|---|---|---|---|---|---|---|---|"]
        fixed = {p["job"]: p for p in s["per_job"]}
        for i, lr in enumerate(w["grid"]):
            a, b = w["inherited"]["jobs"][i], w["scratch"]["jobs"][i]
            p = fixed.get(i)
            lines.append(f"| {i + 1} | {lr} | {a['completion_time_s']:.1f} ({a['status']}) | "
                         f"{b['completion_time_s']:.1f} ({b['status']}) | "
                         + (f"{p['best_fixed_s']:.1f} | {p['inherited_over_best']:.2f}x | "
                            f"<= {TARGETS['inherited_over_best']}x |" if p else "- | - | |")
                         + f" {a.get('most_used_setting') or '-'} | {b.get('most_used_setting') or '-'} |")
        lines += ["", f"Total: inherited {s['total_inherited_s']:.1f} s, scratch {s['total_scratch_s']:.1f} s: "
                  f"scratch / inherited {s['scratch_over_inherited_total']:.2f}x (target >= "
                  f"{TARGETS['scratch_over_inherited_total']}x).", ""]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("quick", "smoke"), default="quick")
    parser.add_argument("--workloads", default="logr,cnn")
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    parser.add_argument("--keep", metavar="DIR", help="write the repositories into DIR and keep them "
                                                      "(default: a temporary folder, removed at the end)")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.workloads.split(",") if n.strip()]
    unknown = [n for n in names if n not in GRIDS]
    if unknown:
        parser.error(f"--workloads must name {', '.join(GRIDS)}, got {unknown[0]!r}")
    date = time.strftime("%Y-%m-%d")
    cap = CAP_S[args.mode]
    result = {"mode": args.mode, "date": date, "cap_s": cap, "targets": TARGETS, "workloads": {}}
    stem = os.path.join(args.out, f"{date}-sweep-{args.mode}")

    def log(message):
        print(message, flush=True)

    with tempfile.TemporaryDirectory() as scratch_dir:
        tmp = args.keep or scratch_dir
        os.makedirs(tmp, exist_ok=True)
        for name in names:
            grid = GRIDS[name] if args.mode == "quick" else GRIDS[name][:2]
            log(f"{name}: {len(grid)} jobs, learning rates {grid}")
            log("  inherited (tfonline.sweep)")
            inherited = _arm(name, args.mode, grid, cap, os.path.join(tmp, f"{name}-inherited.db"), log, tune=True)
            log("  scratch (tuning={'resume': False})")
            scratch = _arm(name, args.mode, grid, cap, os.path.join(tmp, f"{name}-scratch.db"), log, tune=True,
                           tuning={"resume": False})
            log("  fixed")
            fixed = _fixed(name, args.mode, grid, cap, os.path.join(tmp, f"{name}-fixed.db"), log)
            result["workloads"][name] = {"grid": grid, "inherited": inherited, "scratch": scratch,
                                         "fixed": {str(k): v for k, v in fixed.items()},
                                         "summary": summarise(inherited, scratch, fixed, cap)}
            os.makedirs(args.out, exist_ok=True)
            with open(stem + ".json", "w") as f:
                json.dump(result, f, indent=2)
            with open(stem + ".md", "w") as f:
                f.write(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
