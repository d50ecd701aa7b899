"""What a benchmark's tuned runs did, read from their repository.

    python benchmarks/experiments/tuned_runs.py benchmarks/results/<stem>-tuned.db [JOB_NAME]

Per tuned job (its name, ``CNN`` say, filters): the setting it started on
and the job it inherited that start from, its time and iterations, the
iterations and mean seconds per iteration it ran on each worker count, its
switches and what they cost, and the segment noise its decisions read at
its end (:func:`tfonline.tuner.recheck.segment_noise`). Reads only; about
2 s for the five tuned CNN runs of a full benchmark.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict

import sqlite_utils

from tfonline.tuner._records import Triple
from tfonline.tuner.recheck import segment_noise


def describe(db, job: dict, settings: dict[str, tuple[dict, str]]) -> list[str]:
    """The lines on one tuned job; ``settings``: each setting's knobs and short form, by its id."""
    segments = list(db.query("select * from segments where job_id = ? order by segment", [job["id"]]))
    if not segments:
        return [f"{job['id']}: no segments"]
    start = settings[segments[0]["setting_id"]][1]
    inherited = [row["from_job_id"] for row in db.query(
        "select from_job_id from inheritances where job_id = ? and start = 1", [job["id"]])]
    by_workers: dict[int, list[float]] = defaultdict(lambda: [0, 0.0])
    for s in segments:
        if s["end_step"] is None:  # the segment a running job is in
            continue
        ran = by_workers[settings[s["setting_id"]][0]["worker"]]
        ran[0] += s["end_step"] - s["start_step"]
        ran[1] += s["ended_at"] - s["started_at"]
    switches = list(db.query("select cost_s from reconfigurations where job_id = ?", [job["id"]]))
    triples = [Triple(settings[t["setting_id"]][0], t["loss_before"],
                      t["per_iteration_s"], t["remaining_iterations"], t["remaining_s"])
               for t in db.query("select * from triples where job_id = ? order by segment", [job["id"]])]
    lines = [f"{job['id']} seed {job['seed']}: {job['status']}, {job['completion_time_s'] or 0:.1f} s, "
             f"{job['iterations']} iterations; started on {start}"
             + (f" (inherited from {inherited[0]})" if inherited else " (its own start)")]
    for workers, (iterations, seconds) in sorted(by_workers.items()):
        per = seconds / iterations * 1000 if iterations else float("nan")
        lines.append(f"  w{workers}: {iterations} iterations, {per:.1f} ms each (switch time included)")
    lines.append(f"  {len(switches)} switches, {sum(s['cost_s'] or 0 for s in switches):.1f} s; segment noise at "
                 f"the end {segment_noise(triples):.3f} over {len(triples)} triples")
    return lines


def main(argv: list[str]) -> int:
    if not argv or len(argv) > 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    db = sqlite_utils.Database(argv[0])
    where, params = ("where tuned = 1 and name = ?", [argv[1]]) if len(argv) == 2 else ("where tuned = 1", [])
    settings = {row["id"]: (json.loads(row["knobs"]), row["short"]) for row in db["settings"].rows}
    for job in db.query(f"select * from jobs {where} order by started_at", params):
        print("\n".join(describe(db, job, settings)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
