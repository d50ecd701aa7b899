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


# /proc/stat's "cpu" line: user nice system idle iowait irq softirq steal (guest time is counted in user)
_BUSY, _NICE, _IDLE, _STEAL = (0, 2, 5, 6), (1,), (3, 4), (7,)


def machine_sample(stat: str = "/proc/stat") -> tuple | None:
    """What the machine's CPUs did so far: the ticks of ``stat``'s "cpu" line (all CPUs) and this process's own
    CPU seconds with its waited-for children's (``os.times``); None where there is no such file (not Linux)."""
    try:
        with open(stat) as f:
            ticks = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    if len(ticks) < 8:
        return None
    t = os.times()
    return ticks, t.user + t.system + t.children_user + t.children_system


def machine_load(before: tuple | None, after: tuple | None) -> dict | None:
    """How the machine's CPU time went between two :func:`machine_sample` s: the shares of it stolen by the
    hypervisor (``steal``: a host that ran others' machines on these cores), idle, busy in processes other
    than this one and the children it waited for at the default priority or above (``others``: another job on
    this machine), and in processes at a lower one (``niced``: they take what the others leave, such as tests run
    at idle priority beside a sitting); None without both. This process is taken to run at the default priority.

    A benchmark's runs are comparable only on a machine that keeps its speed, and one machine's speed moved
    1.7x within six hours (NOTES.md, fiftieth session) with no cause seen. So every run records this beside
    its time: a run slowed by steal or by another process says so. A run's node processes are the driver's
    children, waited for when the run ends, so their CPU counts as the run's own."""
    if before is None or after is None:
        return None
    ticks = [b - a for a, b in zip(before[0], after[0])]
    total = sum(ticks)
    if total <= 0:
        return None
    tick_s = 1.0 / os.sysconf("SC_CLK_TCK")
    busy_s, ours_s = sum(ticks[i] for i in _BUSY) * tick_s, max(after[1] - before[1], 0.0)
    share = lambda fields: sum(ticks[i] for i in fields) / total  # noqa: E731
    return {"steal": share(_STEAL), "idle": share(_IDLE), "others": max(busy_s - ours_s, 0.0) / (total * tick_s),
            "niced": share(_NICE)}


def measure(name: str, mode: str) -> dict:
    """The speed check of workload ``name`` at ``mode``'s size, on this machine: the default setting at seed 0
    for :data:`CHECK_S` seconds; its time per iteration after start-up, and its iterations."""
    job = workloads.job(name, mode)
    job.max_seconds = CHECK_S
    with tempfile.TemporaryDirectory(prefix="tfonline-speed-") as scratch:
        db = os.path.join(scratch, "speed.db")
        before = machine_sample()
        result = job.run(db=db, quiet=True, seed=0)
        load = machine_load(before, machine_sample())
        row = job_row(db, result.job_id)
    if not row["time_per_iteration_s"]:
        raise ValueError(f"the speed check of {name} expected iterations after start-up, got {row['iterations']}")
    return {"time_per_iteration_s": row["time_per_iteration_s"], "iterations": row["iterations"], "machine": load}


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
