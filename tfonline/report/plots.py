"""The report's figures, as PNG files (matplotlib, no display needed).

For each job: loss against wall time, with the end of the initial phases
as a dotted vertical line and a marker at every reconfiguration (the
paper's Fig. 6); loss against iterations (Fig. 7); wall time per iteration
in each segment; the estimated remaining time against the actual one; and,
for a job with ``eval_input_fn``, its metrics on held-out data.
"""

from __future__ import annotations

import hashlib
import os
import re
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from tfonline.repository import Repository, last_wall_time  # noqa: E402

WIDTH_PX, HEIGHT_PX, DPI = 800, 450, 100
BUCKETS = 2 * WIDTH_PX  # a long job's iterations, in runs: two per pixel column
EXACT_POINTS = 2 * BUCKETS  # up to this many, every iteration is drawn
PLOTS = ("loss-time", "loss-iterations", "iteration-time", "eta")  # and "evaluation", for a job evaluated


def series(repo: Repository, job_id: str) -> dict[str, Any]:
    """The per-iteration and per-estimate series the figures draw.

    A figure is :data:`WIDTH_PX` pixels wide, so a long job's iterations
    are read in :data:`BUCKETS` runs of consecutive steps, aggregated by
    SQLite: each run's mean step, wall time and smoothed loss, and its
    lowest and highest loss (the band the raw loss fills). A job of up to
    :data:`EXACT_POINTS` iterations is read point by point, its band one
    point wide.
    """
    count = next(repo.rows("select count(*) as n, min(step) as first, max(step) as last from iterations "
                           "where job_id = ?", (job_id,)))
    if count["n"] <= EXACT_POINTS:
        rows = list(repo.rows("select step, wall_time, loss, loss as loss_low, loss as loss_high, smoothed_loss "
                              "from iterations where job_id = ? order by step", (job_id,)))
    else:  # a query per run, each a range of the primary key: twice as fast as one "group by" (a sort)
        first, span = count["first"], count["last"] - count["first"] + 1
        bounds = [first + k * span // BUCKETS for k in range(BUCKETS + 1)]
        runs = (next(repo.rows(
            "select avg(step) as step, avg(wall_time) as wall_time, avg(loss) as loss, min(loss) as loss_low, "
            "max(loss) as loss_high, avg(smoothed_loss) as smoothed_loss from iterations where job_id = ? "
            "and step >= ? and step < ?", (job_id, low, high))) for low, high in zip(bounds, bounds[1:]))
        rows = [run for run in runs if run["step"] is not None]  # a run of steps a resumed job lost is empty
    estimates = list(repo.rows("select step, wall_time, remaining_s from estimates where job_id = ? "
                               "and remaining_s is not null order by wall_time", (job_id,)))
    moves = list(repo.rows("select r.step, r.technique, i.wall_time, i.smoothed_loss from reconfigurations r "
                           "left join iterations i on i.job_id = r.job_id and i.step = r.step where r.job_id = ? "
                           "order by r.step", (job_id,)))
    online = next(repo.rows("select min(wall_time) as w, min(start_step) as s from phases where job_id = ? "
                            "and phase = 'online'", (job_id,)))
    return {"iterations": rows, "estimates": estimates, "reconfigurations": moves, "online": online,
            "decimated": count["n"] > EXACT_POINTS}


def _figure(title: str):
    fig, ax = plt.subplots(figsize=(WIDTH_PX / DPI, HEIGHT_PX / DPI), dpi=DPI)
    ax.set_title(title, fontsize=11)
    ax.grid(True, alpha=0.3)
    return fig, ax


def _save(fig, path: str) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def _empty(ax, why: str) -> None:
    ax.text(0.5, 0.5, why, ha="center", va="center", transform=ax.transAxes, color="0.4")


def _loss_plot(report: dict[str, Any], its: list[dict], xs: list[float], boundary: float | None,
               marks: list[tuple[float, float]], xlabel: str, against: str, path: str, band: bool) -> str:
    """Loss and smoothed loss against ``xs``; a dotted line where the initial phases end (``boundary``), a
    triangle at every reconfiguration (``marks``: x and smoothed loss), the target. With ``band`` (a long
    job's runs of iterations) the loss is the band from each run's lowest to its highest."""
    fig, ax = _figure(f"{report['name']}: loss against {against}")
    if its:
        if band:
            ax.fill_between(xs, [r["loss_low"] for r in its], [r["loss_high"] for r in its], color="C0", lw=0,
                            alpha=0.25, label="loss (lowest to highest)")
        else:
            ax.plot(xs, [r["loss"] for r in its], color="C0", lw=0.6, alpha=0.35, label="loss")
        ax.plot(xs, [r["smoothed_loss"] for r in its], color="C0", lw=1.8, label="smoothed loss")
        if boundary is not None:
            ax.axvline(boundary, color="0.2", ls=":", lw=1.5, label="initial phases end")
        if marks:
            ax.plot([x for x, _ in marks], [loss for _, loss in marks], "v", color="C3", ms=7,
                    label="reconfiguration")
        ax.axhline(report["target_loss"], color="C2", ls="--", lw=1, label="target")
        ax.legend(fontsize=8)
    else:
        _empty(ax, "no iterations")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("loss")
    return _save(fig, path)


def file_stem(job_id: str) -> str:
    """A file name for ``job_id`` that stays inside its folder whatever the id holds ("/", "..", NUL).

    An id tfonline made is kept as it is; any other has its other characters
    replaced and a hash of the id appended, so two ids never share a file.
    """
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", str(job_id)).lstrip(".")[:100]
    if safe == job_id:
        return safe
    return f"{safe or 'job'}-{hashlib.sha256(str(job_id).encode()).hexdigest()[:8]}"


def draw(repo: Repository, report: dict[str, Any], folder: str) -> dict[str, str]:
    """Draws one job's figures into ``folder``; returns their paths by name (:data:`PLOTS`)."""
    os.makedirs(folder, exist_ok=True)
    data = series(repo, report["id"])
    its = data["iterations"]
    t0 = report["started_at"]
    paths = {}
    base = os.path.join(folder, file_stem(report["id"]))

    marks = [m for m in data["reconfigurations"] if m["wall_time"] is not None]
    online = data["online"]
    paths["loss-time"] = _loss_plot(
        report, its, [r["wall_time"] - t0 for r in its], None if online["w"] is None else online["w"] - t0,
        [(m["wall_time"] - t0, m["smoothed_loss"]) for m in marks], "wall time since run() (s)", "wall time",
        f"{base}-loss-time.png", data["decimated"])
    paths["loss-iterations"] = _loss_plot(report, its, [r["step"] for r in its], online["s"], [], "iteration",
                                          "iterations", f"{base}-loss-iterations.png", data["decimated"])

    fig, ax = _figure(f"{report['name']}: wall time per iteration, by segment")
    timed = [s for s in report["segments"] if s["wall_time_per_iteration_s"] is not None]
    if timed:
        ax.bar([s["segment"] for s in timed], [s["wall_time_per_iteration_s"] for s in timed], color="C0")
        if len(timed) <= 40:  # a tick per segment while they can be read; matplotlib's own beyond
            ax.set_xticks([s["segment"] for s in timed])
            ax.tick_params(axis="x", labelsize=7)
    else:
        _empty(ax, "no segment with two iterations")
    ax.set_xlabel("segment")
    ax.set_ylabel("s per iteration")
    paths["iteration-time"] = _save(fig, f"{base}-iteration-time.png")

    fig, ax = _figure(f"{report['name']}: estimated and actual remaining time")
    end = last_wall_time(repo, report["id"])
    if data["estimates"] and report["status"] == "converged":
        xs = [e["wall_time"] - t0 for e in data["estimates"]]
        ax.plot(xs, [e["remaining_s"] for e in data["estimates"]], color="C1", lw=1.5, label="estimated")
        ax.plot(xs, [end - e["wall_time"] for e in data["estimates"]], color="C0", lw=1.5, label="actual")
        ax.legend(fontsize=8)
    elif data["estimates"]:
        xs = [e["wall_time"] - t0 for e in data["estimates"]]
        ax.plot(xs, [e["remaining_s"] for e in data["estimates"]], color="C1", lw=1.5, label="estimated")
        ax.legend(fontsize=8, title="not converged: actual unknown")
    else:
        _empty(ax, "no estimates recorded")
    ax.set_xlabel("wall time since run() (s)")
    ax.set_ylabel("remaining time (s)")
    paths["eta"] = _save(fig, f"{base}-eta.png")
    if report.get("evaluations"):
        paths["evaluation"] = _evaluation_plot(report, f"{base}-evaluation.png")
    return paths


def _evaluation_plot(report: dict[str, Any], path: str) -> str:
    """Each metric on held-out data against the step it was measured at (each checkpoint's, and the end's)."""
    fig, ax = _figure(f"{report['name']}: metrics on held-out data")
    names = sorted({name for e in report["evaluations"] for name in e["metrics"]})
    for i, name in enumerate(names):
        points = [(e["step"], e["metrics"][name]) for e in report["evaluations"] if name in e["metrics"]]
        ax.plot([step for step, _ in points], [value for _, value in points], marker="o", color=f"C{i}", label=name)
    ax.legend(fontsize=8)
    ax.set_xlabel("iteration")
    ax.set_ylabel("metric")
    return _save(fig, path)
