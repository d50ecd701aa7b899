"""The paper benchmark's figures as PNGs beside its tables (``benchmarks/paper.py`` calls :func:`draw`).

- ``<stem>-fig5.png``: completion time of the worst, average and best
  random fixed settings and of tfonline, per workload (the paper's Fig. 5),
  on a log scale so that the workloads share one axis.
- ``<stem>-loss-<workload>.png``: the smoothed loss against the wall time
  since ``run()`` was called (start-up included) for tfonline's first tuned
  run, the best fixed setting, and the fixed setting whose completion time
  is nearest the average, with the target as a dashed line (log scale). A simulated
  workload has no such figure: its fixed runs keep no iterations.

    python benchmarks/figures.py benchmarks/results/<date>-<mode>.json   # redraw from a finished run
"""

from __future__ import annotations

import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import journal  # noqa: E402
from tfonline.report.plots import series  # noqa: E402
from tfonline.repository import Repository  # noqa: E402

BARS = (("worst", "worst fixed", "#b2182b"), ("average", "average fixed", "#ef8a62"),
        ("best", "best fixed", "#67a9cf"), ("tfonline", "tfonline", "#1b7837"))


def fig5(result: dict, path: str) -> str:
    names = list(result["workloads"])
    fig, ax = plt.subplots(figsize=(max(5.0, 1.8 * len(names) + 2), 4.0), dpi=100)
    width = 0.8 / len(BARS)
    for i, (key, label, colour) in enumerate(BARS):
        values = [result["workloads"][n]["summary"]["completion_time_s"][key] for n in names]
        ax.bar([j + (i - 1.5) * width for j in range(len(names))], values, width, label=label, color=colour)
    ax.set_xticks(range(len(names)), names)
    ax.set_yscale("log")
    ax.set_ylabel("completion time, s (log scale)")
    ax.set_title(f"Completion time (Fig. 5), {result['mode']} mode, {result['date']}", fontsize=11)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


CURVE_POINTS = 400  # a run's smoothed loss as the loss figure draws it, and as the benchmark's traces keep it


def curve(db: str, job_id: str) -> dict:
    """A run's smoothed loss against the wall time since ``run()``, in :data:`CURVE_POINTS` points at most (six
    significant figures), from its repository: what its loss figure draws."""
    repo = Repository(db, create=False)
    try:
        job = repo.jobs(job_id)[0]
        rows = [r for r in series(repo, job_id)["iterations"] if r["smoothed_loss"] is not None]
    finally:
        repo.db.conn.close()
    rows = rows[::max(1, -(-len(rows) // CURVE_POINTS))]
    return {"job_id": job_id, "wall_s": [_short(r["wall_time"] - job["started_at"]) for r in rows],
            "smoothed_loss": [_short(r["smoothed_loss"]) for r in rows], "target_loss": job["target_loss"]}


def _short(x: float) -> float:
    return float(f"{x:.6g}")


def _curve(db: str, job_id: str, kept: dict[str, dict]) -> tuple[list[float], list[float], float | None] | None:
    """A run's curve (:func:`curve`) as the run kept it in the benchmark's traces, else from its repository;
    None where neither is here (a repository lost with an earlier machine)."""
    found = kept.get(job_id) or (curve(db, job_id) if os.path.exists(db) else None)
    return None if found is None else (found["wall_s"], found["smoothed_loss"], found["target_loss"])


def _nearest_average(workload: dict) -> dict | None:
    average = workload["summary"]["completion_time_s"]["average"]
    runs = [r for r in workload["fixed"] if r.get("job_id") and r.get("completion_time_s") is not None]
    return min(runs, key=lambda r: abs(r["completion_time_s"] - average)) if runs else None


def loss_figure(name: str, workload: dict, tuned_db: str, fixed_db: str, path: str,
                kept: dict[str, dict] | None = None) -> str | None:
    """The figure of the module's docstring, each run's curve from ``kept`` (by job id) or its repository; None
    where no run has one."""
    fixed = [r for r in workload["fixed"] if r.get("job_id") and r.get("completion_time_s") is not None]
    tuned = [r for r in workload["tuned"] if r.get("job_id")]
    if not fixed or not tuned:
        return None
    best = min(fixed, key=lambda r: r["completion_time_s"])
    lines = [("tfonline (seed 0)", tuned_db, tuned[0], "#1b7837"),
             (f"best fixed: {best.get('setting')}", fixed_db, best, "#67a9cf")]
    middle = _nearest_average(workload)
    if middle is not None and middle is not best:
        lines.append((f"near the average: {middle.get('setting')}", fixed_db, middle, "#ef8a62"))
    curves = [(label, run, colour, _curve(db, run["job_id"], kept or {})) for label, db, run, colour in lines]
    if not any(curve for *_, curve in curves):
        return None
    fig, ax = plt.subplots(figsize=(8.0, 4.5), dpi=100)
    target = None
    for label, run, colour, curve in curves:
        if curve is None:
            continue
        xs, ys, target = curve
        ax.plot(xs, ys, label=f"{label} ({run['completion_time_s']:.0f} s)", color=colour, linewidth=1.2)
    if target is not None:
        ax.axhline(target, color="0.3", linestyle="--", linewidth=0.8, label=f"target {target:g}")
    ax.set_xlabel("wall time since run(), s")
    ax.set_yscale("log")  # the approach to the target is what tells the settings apart
    ax.set_ylabel("smoothed loss (log scale)")
    ax.set_title(f"{name}: loss against wall time", fontsize=11)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def draw(result: dict, stem: str) -> list[str]:
    """Writes the figures of a benchmark result next to ``stem`` (its JSON's path without ``.json``)."""
    written = [fig5(result, stem + "-fig5.png")]
    kept = {t["curve"]["job_id"]: t["curve"] for t in journal.read_traces(stem).values() if t.get("curve")}
    for name, workload in result["workloads"].items():
        if workload.get("simulated"):
            continue
        path = loss_figure(name, workload, stem + "-tuned.db", stem + "-fixed.db", f"{stem}-loss-{name}.png", kept)
        if path:
            written.append(path)
    return written


if __name__ == "__main__":
    json_path = sys.argv[1]
    with open(json_path) as f:
        for p in draw(json.load(f), os.path.splitext(json_path)[0]):
            print(p)
