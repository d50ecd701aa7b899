"""Is this the machine a workload's earlier sittings ran on? The full benchmark's speed check.

A full benchmark runs in sittings (:mod:`journal`), and a sitting may land on
another machine. Sitting 9 did (2026-11-28): SVM's default setting at seed 0
took 205.7 s there against 75.3 s on the machine of sittings 1-8, and its
last 15 random settings, set against tuned runs from the faster machine,
inflated Average. Ratios measured on two machines mean nothing.

So before a sitting runs the first run of a workload, it runs the workload's
speed check (:func:`measure`): the default setting, seed 0, for
:data:`CHECK_S` seconds of wall time, and its time per iteration after
start-up. The workload's first check is its reference. A later check more
than :data:`TOLERANCE` times off it, either way, means another machine
(:func:`verdict`): the sitting defers the workload (it runs none of its runs
and goes on with the next) and says so. The workload then waits for a
machine like its first, or runs again whole on this one (``paper.py --redo
NAME``), whose first check is then the reference. Every check is kept in the
journal, and the tables list them.

The tolerance is set from checks on one machine (NOTES.md, forty-first
session): repeated checks of a workload there differed by at most
:data:`MEASURED_NOISE`, and the two machines seen so far by 2.6-3.9x (by workload and setting).
"""

from __future__ import annotations

import os
import tempfile

import workloads
from rows import job_row

CHECK_S = 60.0  # the check's wall time, start-up included
MEASURED_NOISE = 0.07  # the largest relative difference between checks of a workload on one machine, rounded up
TOLERANCE = 1.25  # a check this many times slower or faster than the reference is another machine


def measure(name: str, mode: str) -> dict:
    """The speed check of workload ``name`` at ``mode``'s size, on this machine: the default setting at seed 0
    for :data:`CHECK_S` seconds; its time per iteration after start-up, and its iterations."""
    job = workloads.job(name, mode)
    job.max_seconds = CHECK_S
    with tempfile.TemporaryDirectory(prefix="tfonline-speed-") as scratch:
        db = os.path.join(scratch, "speed.db")
        result = job.run(db=db, quiet=True, seed=0)
        row = job_row(db, result.job_id)
    if not row["time_per_iteration_s"]:
        raise ValueError(f"the speed check of {name} expected iterations after start-up, got {row['iterations']}")
    return {"time_per_iteration_s": row["time_per_iteration_s"], "iterations": row["iterations"]}


def verdict(name: str, reference: dict | None, measured: dict) -> str | None:
    """Why ``measured`` is another machine than ``reference`` (the workload's first check), in one line; None when
    it is the same one (or there is no reference yet: this check becomes it)."""
    if reference is None:
        return None
    ratio = measured["time_per_iteration_s"] / reference["time_per_iteration_s"]
    if 1 / TOLERANCE <= ratio <= TOLERANCE:
        return None
    return (f"{name}'s speed check expected {1e3 * reference['time_per_iteration_s']:.3f} ms per iteration "
            f"within {TOLERANCE:g}x (sitting {reference['sitting']}'s), got "
            f"{1e3 * measured['time_per_iteration_s']:.3f} ms ({ratio:.2f}x): another machine")
