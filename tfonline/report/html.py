"""The report as one self-contained HTML page: the tables, and the figures embedded as data URIs."""

from __future__ import annotations

import base64
import html
import tempfile
from typing import Any

from tfonline.report import STATUS_WORDS, _fmt, compare_text, eta_unmeasured
from tfonline.report.plots import PLOTS, draw
from tfonline.repository import Repository

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 1100px; }
h1 { font-size: 1.5em; } h2 { font-size: 1.25em; border-bottom: 1px solid #ccc; margin-top: 2em; }
h3 { font-size: 1.05em; margin-top: 1.4em; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }
th, td { border: 1px solid #ddd; padding: 0.2em 0.6em; text-align: right; }
th { background: #f3f3f3; } td.l, th.l { text-align: left; }
td.changed { background: #fff3c4; }
img { width: 800px; max-width: 100%; display: block; margin: 0.5em 0; }
.muted { color: #777; }
"""


def _table(headers: list[str], rows: list[list[Any]], left: set[int] = frozenset(),
           marked: set[tuple[int, int]] = frozenset()) -> str:
    head = "".join(f"<th class='{'l' if i in left else ''}'>{html.escape(h)}</th>" for i, h in enumerate(headers))
    body = []
    for r, row in enumerate(rows):
        cells = []
        for i, value in enumerate(row):
            classes = " ".join(c for c in ("l" if i in left else "", "changed" if (r, i) in marked else "") if c)
            cells.append(f"<td class='{classes}'>{html.escape(str(value))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _image(path: str, alt: str) -> str:
    with open(path, "rb") as f:
        data = base64.b64encode(f.read()).decode("ascii")
    return f"<img alt='{html.escape(alt)}' src='data:image/png;base64,{data}'>"


def job_section(repo: Repository, r: dict[str, Any], folder: str, paths: dict[str, str] | None = None) -> str:
    parts = [f"<h2>{html.escape(r['name'])} <span class='muted'>{html.escape(r['id'])}</span></h2>"]
    summary = [
        ["status", f"{STATUS_WORDS.get(r['status'], r['status'])}: {r['stop_reason'] or ''}"],
        ["mode", r["mode"]], ["tuned", "yes" if r["tuned"] else "no"],
        ["completion time", f"{_fmt(r['completion_time_s'], '.1f')} s"],
        ["first iteration", f"{_fmt(r['first_iteration_s'], '.1f')} s after run()"],
        ["iterations", r["iterations"]],
        ["target / final loss", f"{_fmt(r['target_loss'], 'g')} / {_fmt(r['final_loss'])}"],
        ["time in phases", ", ".join(f"{p['phase']} {_fmt(p['duration_s'], '.1f')} s" for p in r["phases"])],
        ["tuning overhead", "-" if r["tuning_overhead_fraction"] is None else
         f"{r['tuning_overhead_s']:.1f} s ({100 * r['tuning_overhead_fraction']:.1f}% of the job)"],
        ["host", f"{r['host']}, TensorFlow {r['tf_version']}, Python {r['python']}"],
    ]
    summary += [["resumed", f"at step {e['step']}, {e['lost_steps']} iterations lost, after a gap of "
                            f"{e['gap_s']:.1f} s"] for e in r.get("resumes", [])]
    if r["tuned"]:
        from tfonline.report import inherited_text

        summary.append(["inherited", inherited_text(r.get("inherited", []))])
    if r.get("evaluations"):
        last = r["evaluations"][-1]
        summary.append(["held-out metrics", ", ".join(f"{k} {v:.4g}" for k, v in last["metrics"].items())
                        + f" (step {last['step']})"])
    if r.get("checkpoints"):
        summary.append(["model", f"{r['checkpoints'][-1]['path']} (step {r['checkpoints'][-1]['step']})"])
    parts.append(_table(["", ""], summary, left={0, 1}))
    paths = paths or draw(repo, r, folder)
    titles = {"loss-time": "Loss against wall time (dotted: end of the initial phases; triangles: reconfigurations)",
              "loss-iterations": "Loss against iterations", "iteration-time": "Wall time per iteration, by segment",
              "eta": "Estimated and actual remaining time",
              "evaluation": "Metrics on held-out data, at each checkpoint and the end"}
    for name in (*PLOTS, "evaluation"):
        if name in paths:
            parts.append(f"<h3>{titles[name]}</h3>{_image(paths[name], titles[name])}")
    table = r["settings_table"]
    if table["columns"]:
        parts.append("<h3>Settings (the paper's Table IV; shaded: differs from the initial setting)</h3>")
        headers = ["knob"] + [c["label"] for c in table["columns"]]
        rows = [["s/iter (all its segments)"] + [_fmt(c["wall_time_per_iteration_s"], ".4f") for c in table["columns"]]]
        marked = set()
        for i, row in enumerate(table["rows"]):
            rows.append([row["knob"]] + row["values"])
            marked |= {(i + 1, j + 1) for j, v in enumerate(row["values"]) if v != row["values"][0]}
        parts.append(_table(headers, rows, left={0}, marked=marked))
    parts += _history(r)
    return "\n".join(parts)


def _history(r: dict[str, Any]) -> list[str]:
    """The job's segments, reconfigurations, decisions and ETA accuracy, as HTML tables."""
    parts = []
    if r["segments"]:
        parts.append("<h3>Segments</h3>")
        parts.append(_table(
            ["#", "phase", "steps", "iterations", "s/iter", "exec s", "loss start", "loss end", "setting"],
            [[s["segment"], s["phase"] or "", f"{_fmt(s['first_step'], 'd')}-{_fmt(s['last_step'], 'd')}",
              s["iterations"], _fmt(s["wall_time_per_iteration_s"], ".4f"), _fmt(s["mean_exec_time_s"], ".4f"),
              _fmt(s["start_loss"]), _fmt(s["end_loss"]), s["setting"] or s["setting_id"]] for s in r["segments"]],
            left={1, 8}))
    if r["reconfigurations"]:
        parts.append("<h3>Reconfigurations</h3>")
        parts.append(_table(
            ["step", "types", "technique", "cost s", "MB moved", "iterations during", "from", "to"],
            [[m["step"], m["types"], m["technique"], _fmt(m["cost_s"], ".3f"), f"{(m['bytes_moved'] or 0) / 1e6:.1f}",
              _fmt(m["iterations_during"], "d"), m["from"] or "?", m["to"] or "?"] for m in r["reconfigurations"]],
            left={1, 2, 6, 7}))
    if r["decisions"]:
        parts.append("<h3>Decisions (expected improvement against switch cost)</h3>")
        parts.append(_table(
            ["step", "phase", "loss", "EI s", "cost s", "decision", "reason"],
            [[d["step"], d["phase"], _fmt(d["loss"], ".4f"), _fmt(d["expected_improvement_s"], ".3g"),
              _fmt(d["cost_s"], ".3g"), ("switch to " if d["applied"] else "stay; best other ") + (d["candidate"] or "-"),
              d["reason"]] for d in r["decisions"]], left={1, 5, 6}))
    parts.append("<h3>ETA accuracy</h3>")
    if r.get("eta_earlier_runs"):
        parts.append(f"<p class='muted'>The ETA took {r['eta_earlier_runs']} earlier runs of the job.</p>")
    if r["eta_accuracy"]:
        parts.append(_table(
            ["at", "step", "estimated remaining s", "actual remaining s", "error", "estimator"],
            [[f"{100 * f:.0f}%", "-", "no estimate yet", "", "", ""] for f in eta_unmeasured(r)]
            + [[f"{100 * e['fraction']:.0f}%", e["step"], f"{e['estimated_remaining_s']:.1f}",
                f"{e['actual_remaining_s']:.1f}", _fmt(e["error"] and 100 * e["error"], "+.0f") + "%", e["estimator"]]
               for e in r["eta_accuracy"]], left={5}))
    else:
        parts.append("<p class='muted'>No estimate to check: the job did not converge, or recorded none.</p>")
    return parts


def page(repo: Repository, reports: list[dict[str, Any]], comparison: dict[str, Any] | None = None,
         drawn: dict[str, dict[str, str]] | None = None) -> str:
    """The whole page, with each job's figures embedded: those ``drawn`` already (by job id), else drawn now
    into a temporary folder."""
    body = [f"<h1>tfonline report <span class='muted'>{html.escape(repo.path)}</span></h1>"]
    if comparison is not None:
        body.append(f"<h2>Comparison</h2><pre>{html.escape(compare_text(comparison))}</pre>")
    if not reports:
        body.append(f"<p>no jobs in {html.escape(repo.path)}</p>")
    with tempfile.TemporaryDirectory(prefix="tfonline-plots-") as scratch:
        for r in reports:
            body.append(job_section(repo, r, scratch, (drawn or {}).get(r["id"])))
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>tfonline report</title>"
            f"<style>{STYLE}</style></head><body>{''.join(body)}</body></html>")
