"""What the report of a long job costs: time and memory of ``tfonline report`` on a generated repository.

    python benchmarks/report_size.py [--iterations 2000000] [--keep DIR]

Builds a repository holding one job of ``--iterations`` iterations (two
hours at 3.6 ms each, a segment every 2,000 iterations, 30 switches, an
estimate every 500 iterations: a tuned job's rows, generated, no
TensorFlow), then runs ``tfonline report`` on it as text, as JSON and as
HTML with its plots, each in a fresh process, and prints each one's wall
time and peak memory (the child's maximum resident set size) beside the
targets: the HTML report of a 2-million-iteration job under 3 s and
300 MB (issue 18).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from tfonline.repository import Repository  # noqa: E402
from tfonline.setting import resolve_setting, setting_key, short_form  # noqa: E402

TARGET_HTML_S, TARGET_HTML_MB = 3.0, 300.0
PER_ITERATION_S = 0.0036
SEGMENT = 2000


def build(path: str, iterations: int, seed: int = 0) -> str:
    """Writes a repository with one converged, tuned job of ``iterations`` iterations; returns its id."""
    import random

    rng = random.Random(seed)
    repo = Repository(path)
    repo.close()
    settings = [resolve_setting({"ps": ps, "worker": w}, 4) for ps, w in ((1, 1), (1, 2), (2, 1), (1, 3))]
    job_id, start = "Long-1", 1_700_000_000.0
    con = __import__("sqlite3").connect(path)
    with con:
        for s in settings:
            con.execute("insert into settings (id, knobs, short) values (?, ?, ?)",
                        (setting_key(s), json.dumps(s, sort_keys=True), short_form(s)))
        end = start + iterations * PER_ITERATION_S
        con.execute(
            "insert into jobs (id, name, script, mode, status, stop_reason, target_loss, started_at, "
            "first_iteration_at, finished_at, completion_time_s, iterations, final_loss, node_count, knob_space, "
            "host, tf_version, python, seed, tuned) values (?, 'Long', 'long.py', 'async', 'converged', "
            "'target_loss 0.2 reached', 0.2, ?, ?, ?, ?, ?, 0.2, 4, '{}', 'bench', '2.x', '3.11', 0, 1)",
            (job_id, start, start + 5, end, end - start, iterations))
        segments = math.ceil(iterations / SEGMENT)
        ids = [setting_key(settings[min(k // 10, len(settings) - 1) % len(settings)]) for k in range(segments)]
        con.executemany(
            "insert into segments (job_id, segment, setting_id, phase, start_step, end_step, started_at, ended_at) "
            "values (?, ?, ?, 'online', ?, ?, ?, ?)",
            [(job_id, k, ids[k], k * SEGMENT + 1, min((k + 1) * SEGMENT, iterations),
              start + k * SEGMENT * PER_ITERATION_S, start + (k + 1) * SEGMENT * PER_ITERATION_S)
             for k in range(segments)])
        smoothed = 0.7

        def rows():
            nonlocal smoothed
            for step in range(1, iterations + 1):
                loss = 0.2 + 0.5 * math.exp(-step / (iterations / 5)) + rng.gauss(0, 0.05)
                smoothed += (loss - smoothed) * 2 / 21
                yield (job_id, step, step % 3, ids[(step - 1) // SEGMENT], (step - 1) // SEGMENT, PER_ITERATION_S,
                       loss, smoothed, start + 5 + step * PER_ITERATION_S)

        con.executemany("insert into iterations (job_id, step, worker, setting_id, segment, exec_time_s, loss, "
                        "smoothed_loss, wall_time) values (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows())
        con.executemany("insert into estimates (job_id, step, estimator, loss, remaining_iterations, remaining_s, "
                        "wall_time) values (?, ?, 'hogwild', 0.3, ?, ?, ?)",
                        [(job_id, step, iterations - step, (iterations - step) * PER_ITERATION_S,
                          start + 5 + step * PER_ITERATION_S) for step in range(500, iterations, 500)])
        switches = [int(iterations * (k + 1) / 31) for k in range(30)]
        con.executemany("insert into reconfigurations (job_id, step, from_setting_id, to_setting_id, types, "
                        "technique, actions, cost_s, bytes_moved, iterations_during, wall_time) values "
                        "(?, ?, ?, ?, 'ps', 'odmr', '[]', 0.5, 1000000, 3, ?)",
                        [(job_id, step, ids[0], ids[-1], start + 5 + step * PER_ITERATION_S) for step in switches])
        con.execute("insert into phases (job_id, phase, start_step, wall_time) values (?, 'online', 1, ?)",
                    (job_id, start + 5))
    con.close()
    return job_id


def measure(args: list[str]) -> tuple[float, float]:
    """Wall time (s) and peak memory (MB, the process's own maximum resident set) of ``tfonline report ARGS``
    in a fresh process."""
    code = "import sys; from tfonline.cli import main; sys.exit(main(sys.argv[1:]))"
    started = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-c", code, "report", *args], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)  # this child's own usage, not the largest of all children's
    elapsed = time.perf_counter() - started
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"tfonline report {' '.join(args)} failed: {child.stderr.read().decode()[-500:]}")
    return elapsed, usage.ru_maxrss / 1024  # KiB on Linux


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=2_000_000)
    parser.add_argument("--keep", help="build the repository and the report in DIR and keep them")
    args = parser.parse_args(argv)
    folder = args.keep or tempfile.mkdtemp(prefix="tfonline-report-size-")
    os.makedirs(folder, exist_ok=True)
    db = os.path.join(folder, "long.db")
    if os.path.exists(db):
        os.remove(db)
    started = time.perf_counter()
    build(db, args.iterations)
    print(f"repository of one job with {args.iterations:,} iterations built in {time.perf_counter() - started:.1f} s "
          f"({os.path.getsize(db) / 2**20:.0f} MB)")
    results = {}
    for name, extra in (("text", []), ("json", ["--format", "json"]),
                        ("html", ["--html", os.path.join(folder, "long.html")])):
        results[name] = measure([db, *extra])
    print(f"{'report':8}{'wall s':>9}{'peak MB':>10}   target")
    for name, (seconds, mb) in results.items():
        target = f"< {TARGET_HTML_S:g} s, < {TARGET_HTML_MB:g} MB" if name == "html" else ""
        print(f"{name:8}{seconds:9.2f}{mb:10.0f}   {target}")
    if not args.keep:
        for name in os.listdir(folder):
            os.remove(os.path.join(folder, name))
        os.rmdir(folder)
    return results


if __name__ == "__main__":
    main()
