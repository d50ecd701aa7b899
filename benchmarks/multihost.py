"""The paper's comparison across hosts: every layout fixed, and a tuned job, on network namespaces whose links
are limited (issue 20's multi-host section).

    python benchmarks/multihost.py [--hosts 4] [--rate 100mbit] [--workload cnn] [--cap 300] [--random R]
                                   [--out DIR]

Makes ``--hosts`` network namespaces on a bridge (``tests/hosts.py``), each
link limited both ways to ``--rate`` by a token bucket (``tc tbf``; this
kernel has no ``netem``, so no latency is added), starts a ``tfonline
node`` in each, and runs the benchmark-sized workload (``workloads.py``)
there, one job at a time: at every layout (ps + worker <= hosts, the other
knobs at TensorFlow's defaults), or with ``--random R`` at R settings drawn
from the whole knob space (the paper's protocol, the draw of
``benchmarks/paper.py``: thread pools too, which the nodes serve when asked),
then tuned from TensorFlow's default setting. The driver runs in this
namespace and reaches the nodes over the bridge. Prints and writes
(``benchmarks/results/<date>-hosts-<workload>[-r<R>].{md,json}``, the JSON
after every run) each setting's completion time, the worst, average and
best, and the tuned job's, with the paper's ratios. Needs root.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, os.pardir, "tests"))

import workloads  # noqa: E402
from hosts import Hosts  # noqa: E402
from paper import DRAW_SEED, draw_settings  # noqa: E402
from rows import job_row  # noqa: E402

from tfonline.setting import short_form  # noqa: E402
from tfonline.tuner.space import KnobSpace  # noqa: E402

TARGETS = {"tuned_over_best": 1.1}  # issue 17's, for every real workload


def layouts(hosts: int) -> list[dict]:
    return [{"ps": ps, "worker": w} for ps in range(1, hosts) for w in range(1, hosts - ps + 1)]


def fixed_settings(hosts: int, random_settings: int) -> dict[str, dict]:
    """The fixed runs, by label: every layout, or ``random_settings`` drawn from the whole knob space."""
    if not random_settings:
        return {f"ps{s['ps']} w{s['worker']}": s for s in layouts(hosts)}
    drawn = draw_settings(KnobSpace(hosts, os.cpu_count() or 1), random_settings, DRAW_SEED)
    return {short_form(setting): setting for setting in drawn}


def run_one(name: str, db: str, cap: float, **options) -> dict:
    job = workloads.job(name, "quick")
    started = time.monotonic()
    try:
        row = job_row(db, job.run(db=db, cluster="TF_CONFIG", quiet=True, max_seconds=cap, **options).job_id)
    except Exception as e:  # a layout that fails is a result too; the benchmark goes on
        row = {"status": "failed", "error": f"{type(e).__name__}: {e}", "completion_time_s": None}
    row["wall_s"] = time.monotonic() - started
    return row


def seconds(row: dict, cap: float) -> float:
    return row["completion_time_s"] if row["status"] == "converged" else cap


def summarise(fixed: dict, tuned: dict, cap: float) -> dict:
    times = {label: seconds(row, cap) for label, row in fixed.items()}
    best, worst, average = min(times.values()), max(times.values()), statistics.mean(times.values())
    t = seconds(tuned, cap)
    return {"best_s": best, "best": min(times, key=times.get), "worst_s": worst, "average_s": average,
            "tuned_s": t, "average_over_tuned": average / t, "tuned_over_best": t / best,
            "captured": (average - t) / (average - best) if average > best else None}


def markdown(result: dict) -> str:
    s = result["summary"]
    drawn = result.get("random", 0)
    fixed = (f"R = {drawn} fixed settings drawn from the whole knob space (seed {DRAW_SEED})" if drawn
             else "every layout fixed (the other knobs at TensorFlow's defaults)")
    lines = [f"# Multi-host benchmark ({result['date']})", "",
             f"{result['hosts']} hosts (network namespaces on a bridge), each link {result['rate']} both ways "
             f"(tc tbf, no added latency); workload {result['workload']}, cap {result['cap_s']:.0f} s; {fixed}; "
             f"tfonline tuned from TensorFlow's default setting.", "",
             "| setting | status | completion (s) | iterations | s per iteration |", "|---|---|---|---|---|"]
    for label, row in list(result["fixed"].items()) + [("tfonline (tuned)", result["tuned"])]:
        lines.append(f"| {label} | {row['status']} | {row['completion_time_s'] or 0:.1f} | {row.get('iterations')} | "
                     f"{row.get('time_per_iteration_s') or 0:.4f} |")
    captured = "-" if s["captured"] is None else f"{s['captured']:.0%}"
    lines += ["", f"worst {s['worst_s']:.1f} s, average {s['average_s']:.1f} s, best {s['best_s']:.1f} s "
              f"({s['best']}), tfonline {s['tuned_s']:.1f} s", "",
              f"- tfonline against the average setting: {s['average_over_tuned']:.2f}x faster",
              f"- tfonline / best: {s['tuned_over_best']:.2f}x (target <= {TARGETS['tuned_over_best']}x)",
              f"- share of the average-to-best gain captured: {captured} (target >= 90%)"]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--rate", default="100mbit", help="each host link's limit, both ways (tc syntax)")
    parser.add_argument("--workload", default="cnn", choices=sorted(workloads.SIZED))
    parser.add_argument("--cap", type=float, default=300.0, help="seconds; a job not converged counts at the cap")
    parser.add_argument("--random", type=int, default=0, metavar="R",
                        help="R fixed settings drawn from the whole knob space instead of every layout")
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    args = parser.parse_args(argv)

    def log(message):
        print(message, flush=True)

    date = time.strftime("%Y-%m-%d")
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, f"{date}-hosts-{args.workload}" + (f"-r{args.random}" if args.random else ""))
    result = {"date": date, "hosts": args.hosts, "rate": args.rate, "workload": args.workload, "cap_s": args.cap,
              "random": args.random, "fixed": {}, "tuned": None}

    def save():  # after every run: a benchmark stopped half-way keeps what it measured
        with open(stem + ".json", "w") as f:
            json.dump(result, f, indent=1)

    with tempfile.TemporaryDirectory(prefix="tfonline-hosts-") as folder, Hosts(args.hosts, rate=args.rate) as hosts:
        os.environ["TF_CONFIG"] = hosts.start_nodes()
        db = os.path.join(folder, "runs.db")
        for label, setting in fixed_settings(args.hosts, args.random).items():
            result["fixed"][label] = row = run_one(args.workload, db, args.cap, setting=setting)
            log(f"  {row['status']:<10} {row['completion_time_s'] or 0:7.1f} s  {label}")
            save()
        result["tuned"] = tuned = run_one(args.workload, db, args.cap, tune=True)
        log(f"  tuned    {tuned['status']:<10} {tuned['completion_time_s'] or 0:7.1f} s  "
            f"{tuned.get('most_used_setting')}")
    result["summary"] = summarise(result["fixed"], tuned, args.cap)
    save()
    text = markdown(result)
    print(text)
    with open(stem + ".md", "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
