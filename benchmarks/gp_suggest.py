"""Time of one tuner suggestion (GP fit + EI maximised over the settings) on a tuned job's own observations.

    python benchmarks/gp_suggest.py DB [--job JOB_ID] [--observations 7 15 30] [--repeats 3]

Takes the usable triples of a tuned job in the repository ``DB`` (the
latest tuned job unless ``--job``), rebuilds its knob space (this machine's
cores, the job's pins), and times ``GPOptimizer.suggest`` on the first N of
them, with and without a knob held (XLA), for each N. Run it alone: the
times are of one idle machine, not of a suggestion made beside a training
job.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sqlite3
import sys
import time

from tfonline.tuner._gpyopt import GPOptimizer, Observation
from tfonline.tuner.space import KnobSpace


def load(db: str, job: str | None) -> tuple[KnobSpace, list[Observation], str]:
    conn = sqlite3.connect(db)
    if job is None:
        row = conn.execute("select id from jobs where tuned = 1 order by started_at desc limit 1").fetchone()
        if row is None:
            raise SystemExit(f"{db}: no tuned job")
        job = row[0]
    node_count, knob_space = conn.execute("select node_count, knob_space from jobs where id = ?", (job,)).fetchone()
    pins = {name: knob["values"][0] for name, knob in json.loads(knob_space).items() if knob.get("pinned")}
    space = KnobSpace(node_count, os.cpu_count() or 1, pins)
    rows = conn.execute("select t.loss_before, t.remaining_s, s.knobs from triples t join settings s on s.id = "
                        "t.setting_id where t.job_id = ? and t.remaining_s is not null order by t.segment", (job,))
    observations = [Observation(json.loads(knobs), loss, remaining) for loss, remaining, knobs in rows
                    if space.contains(json.loads(knobs))]
    return space, observations, job


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("db")
    parser.add_argument("--job")
    parser.add_argument("--observations", type=int, nargs="+", default=[7, 15, 30])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    space, observations, job = load(args.db, args.job)
    print(f"{job}: {len(observations)} usable observations, {len(space.free)} free knobs")
    for n in args.observations:
        if n > len(observations):
            print(f"  {n} observations: the job has only {len(observations)}")
            continue
        chosen = observations[:n]
        for hold in ((), ("global_jit_level",)):
            times = []
            for _ in range(args.repeats + 1):  # the first call imports GPyOpt and is not counted
                started = time.perf_counter()
                GPOptimizer(space, seed=0).suggest(chosen, chosen[-1].loss, chosen[-1].setting, hold=hold)
                times.append(time.perf_counter() - started)
            held = f", {hold[0]} held too" if hold else ""
            print(f"  {n} observations{held}: median {statistics.median(times[1:]):.2f} s per suggestion")
    return 0


if __name__ == "__main__":
    sys.exit(main())
