"""What happened to each job in a repository: text, JSON, plots and an HTML page. Never imports TensorFlow.

:func:`collect` reads one job into a plain dict, the report's content;
:func:`job_text` writes it as text, ``json.dumps`` as JSON (schema in
:data:`JSON_SCHEMA`), :mod:`tfonline.report.plots` draws its figures and
:mod:`tfonline.report.html` puts everything on one self-contained page.
"""

from __future__ import annotations

import json
import time
from typing import Any

from tfonline.exceptions import ConfigurationError
from tfonline.repository import Repository, last_wall_time
from tfonline.signature import Signature

REPORT_VERSION = 1
STATUS_WORDS = {
    "converged": "converged",
    "stopped": "stopped at a limit",
    "failed": "failed",
    "interrupted": "interrupted",
    "data_exhausted": "data exhausted",
    "running": "running",
}
ETA_FRACTIONS = (0.25, 0.5, 0.75)
SETTING_COLUMNS = 6  # Table IV: initial, the best few, final

# The JSON report (``tfonline report DB --format json``): one object,
# {"report_version": 1, "db": path, "jobs": [job, ...]}, each job:
JSON_SCHEMA = {
    "id": "str", "name": "str", "mode": "'async' | 'sync'", "tuned": "bool",
    "status": "converged | stopped | failed | interrupted | data_exhausted | running",
    "stop_reason": "str | null", "started_at": "unix time", "completion_time_s": "float | null (running)",
    "first_iteration_s": "float | null: from run() to the first iteration", "iterations": "int",
    "target_loss": "float", "final_loss": "float | null (smoothed)",
    "phases": "[{phase, start_step, start_s (since run()), duration_s}]: 'start-up' first, then the tuner's",
    "segments": "[{segment, phase, setting, setting_id, first_step, last_step, iterations, "
                "wall_time_per_iteration_s, mean_exec_time_s, start_loss, end_loss}]",
    "settings_table": "{columns: [{label, setting_id, setting, wall_time_per_iteration_s}], "
                      "rows: [{knob, values: [one per column]}]}",
    "reconfigurations": "[{step, types, technique, cost_s, bytes_moved, iterations_during, from, to}]",
    "decisions": "[{step, phase, applied, candidate, loss, expected_improvement_s, cost_s, reason}]",
    "tuning_overhead_s": "float | null", "tuning_overhead_fraction": "float | null",
    "eta_accuracy": "[{fraction, step, estimator, estimated_remaining_s, actual_remaining_s, error}] "
                    "(empty unless the job converged with estimates; none for a fraction before the first)",
    "eta_earlier_runs": "int: the job's earlier converged runs (same name and target) its ETA took "
                        "(tfonline.estimator._prior), as its estimates recorded; 0 for none",
    "signature": "{variables, parameter_bytes, largest_bytes, partitioned, sparse_reads, ops, madds_per_example, "
                 "batch_size, example_shapes, optimizer, mode} | null: the workload (tfonline.signature)",
    "checkpoints": "[{step, path, kind ('periodic' | 'final' | 'interrupted'), cost_s}]",
    "evaluations": "[{step, metrics: {name: value}, cost_s}]: on eval_input_fn's data",
    "resumes": "[{step, lost_steps, gap_s, checkpoint}]: each time the job was resumed from a checkpoint",
    "inherited": "[{job_id, name, distance, triples, gp_fit, start}]: the earlier jobs its tuner started from, "
                 "nearest first (gp_fit: 1 for the job whose GP fit it started from; start: 1 for the job whose "
                 "best setting it started on)",
    "node_losses": "[{step, node, address, role ('worker' | 'ps' | 'idle'), cause, action}]: each node the job "
                   "lost and went on without",
    "node_joins": "[{step, node, address}]: each node of a given cluster that joined the job once it served",
    "cluster_nodes": "int | null", "host": "str", "tf_version": "str", "python": "str",
}


def segment_rows(repo: Repository, job_id: str) -> list[dict[str, Any]]:
    """Each segment with its statistics, computed from its iterations."""
    # The first and last iterations' losses are looked up by step (the primary key) once the segment's
    # first and last steps are known: a correlated "order by step limit 1" per segment walks the job's
    # iterations in step order, which made the report of a long job quadratic in its length.
    return list(repo.rows(
        """
        with stats as (
            select s.segment, s.setting_id, s.phase, st.short as setting, st.knobs,
                   count(i.step) as iterations, min(i.step) as first_step, max(i.step) as last_step,
                   avg(i.exec_time_s) as mean_exec_time_s,
                   case when count(i.step) > 1
                        then (max(i.wall_time) - min(i.wall_time)) / (count(i.step) - 1)
                   end as wall_time_per_iteration_s
            from segments s
            left join settings st on st.id = s.setting_id
            left join iterations i on i.job_id = s.job_id and i.segment = s.segment
            where s.job_id = :job
            group by s.segment
        )
        select stats.*, a.loss as start_loss, b.smoothed_loss as end_loss
        from stats
        left join iterations a on a.job_id = :job and a.step = stats.first_step
        left join iterations b on b.job_id = :job and b.step = stats.last_step
        order by stats.segment
        """,
        {"job": job_id},
    ))


def _end_wall(repo: Repository, job: dict[str, Any]) -> float | None:
    """When the job ended, or, while it runs, its last iteration."""
    if job["finished_at"] is not None:
        return job["finished_at"]
    return last_wall_time(repo, job["id"])


def _phases(repo: Repository, job: dict[str, Any], end: float | None) -> list[dict[str, Any]]:
    """Start-up (run() to the first iteration), then each phase the job went through, with its duration."""
    rows = list(repo.rows("select phase, start_step, wall_time from phases where job_id = ? order by start_step",
                          (job["id"],)))
    first = job["first_iteration_at"]
    if not rows and first is not None:
        rows = [{"phase": "tuned" if job["tuned"] else "fixed", "start_step": 1, "wall_time": first}]
    phases = [{"phase": "start-up", "start_step": 0, "start_s": 0.0,
               "duration_s": ((first or end or job["started_at"]) - job["started_at"])}]
    for i, row in enumerate(rows):
        start = max(row["wall_time"], first or row["wall_time"])
        stop = rows[i + 1]["wall_time"] if i + 1 < len(rows) else end
        phases.append({"phase": row["phase"], "start_step": row["start_step"], "start_s": start - job["started_at"],
                       "duration_s": None if stop is None else max(0.0, stop - start)})
    return phases


def _settings_table(repo: Repository, segments: list[dict[str, Any]]) -> dict[str, Any]:
    """The paper's Table IV: a row per knob; columns: the initial setting, the best few others, the final one.

    With few settings, every one, in the order the job used them; "best"
    is the least wall time per iteration.
    """
    used: dict[str, dict[str, Any]] = {}
    for seg in segments:
        entry = used.setdefault(seg["setting_id"], {"setting_id": seg["setting_id"], "setting": seg["setting"],
                                                    "knobs": json.loads(seg["knobs"] or "{}"), "per_it": []})
        if seg["wall_time_per_iteration_s"] is not None:
            entry["per_it"].append((seg["wall_time_per_iteration_s"], seg["iterations"] - 1))
    if not used:
        return {"columns": [], "rows": []}

    def pace(s: str) -> float:  # its wall time per iteration over all its segments
        timed = used[s]["per_it"]
        gaps = sum(n for _, n in timed)
        return sum(t * n for t, n in timed) / gaps if gaps else float("inf")

    order = list(used)
    initial, final = order[0], order[-1]
    if len(order) <= SETTING_COLUMNS:
        chosen = order
        labels = {s: f"setting {i + 1}" for i, s in enumerate(order)}
    else:
        middle = sorted((s for s in order if s not in (initial, final)), key=pace)[:SETTING_COLUMNS - 2]
        labels = {s: f"best {rank + 1}" for rank, s in enumerate(middle)}
        chosen = [initial] + sorted(middle, key=order.index) + [final]
    labels[initial], labels[final] = "initial", "final" if final != initial else "initial = final"
    columns = [{"label": labels[s], "setting_id": s, "setting": used[s]["setting"],
                "wall_time_per_iteration_s": None if pace(s) == float("inf") else pace(s)} for s in chosen]
    knobs = list(used[initial]["knobs"])
    rows = [{"knob": k, "values": [used[s]["knobs"].get(k) for s in chosen]} for k in knobs]
    return {"columns": columns, "rows": rows}


def _eta_accuracy(repo: Repository, job: dict[str, Any], end: float | None) -> list[dict[str, Any]]:
    """Estimated against actual remaining time at 25, 50 and 75% of a converged job's training time."""
    first = job["first_iteration_at"]
    if job["status"] != "converged" or first is None or end is None:
        return []
    estimates = list(repo.rows("select step, estimator, remaining_s, wall_time from estimates where job_id = ? "
                               "order by wall_time", (job["id"],)))
    rows = []
    for fraction in ETA_FRACTIONS:
        at = first + fraction * (end - first)
        before = [e for e in estimates if e["wall_time"] <= at and e["remaining_s"] is not None]
        if not before:
            continue
        e = before[-1]
        actual = end - e["wall_time"]
        rows.append({"fraction": fraction, "step": e["step"], "estimator": e["estimator"],
                     "estimated_remaining_s": e["remaining_s"], "actual_remaining_s": actual,
                     "error": (e["remaining_s"] - actual) / actual if actual > 0 else None})
    return rows


def _eta_earlier_runs(repo: Repository, job: dict[str, Any]) -> int:
    """How many earlier runs of the job its ETA took (:mod:`tfonline.estimator._prior`), as its estimates
    recorded (0: none, or recorded before version 13)."""
    row = next(repo.rows("select max(prior_runs) as n from estimates where job_id = ?", (job["id"],)))
    return int(row["n"] or 0)


def collect(repo: Repository, job: dict[str, Any]) -> dict[str, Any]:
    """Everything the report says about one job, as plain data (see :data:`JSON_SCHEMA`)."""
    job_id = job["id"]
    end = _end_wall(repo, job)
    iterations = job["iterations"]
    if iterations is None:  # still running: count what is there
        iterations = next(repo.rows("select count(*) as n from iterations where job_id = ?", (job_id,)))["n"]
    segments = segment_rows(repo, job_id)
    moves = list(repo.rows(
        """
        select r.step, r.types, r.technique, r.cost_s, r.bytes_moved, r.iterations_during,
               a.short as "from", b.short as "to"
        from reconfigurations r left join settings a on a.id = r.from_setting_id
        left join settings b on b.id = r.to_setting_id
        where r.job_id = ? order by r.step
        """, (job_id,)))
    decisions = list(repo.rows(
        """
        select d.step, d.phase, d.applied, s.short as candidate, d.loss, d.expected_improvement_s,
               d.reconfiguration_cost_s as cost_s, d.reason
        from decisions d left join settings s on s.id = d.candidate_setting_id
        where d.job_id = ? order by d.step
        """, (job_id,)))
    for d in decisions:
        d["applied"] = bool(d["applied"])
    overhead, completion = job["tuning_overhead_s"], job["completion_time_s"]
    return {
        "id": job_id, "name": job["name"], "mode": job["mode"], "tuned": bool(job["tuned"]),
        "status": job["status"], "stop_reason": job["stop_reason"], "started_at": job["started_at"],
        "completion_time_s": completion,
        "first_iteration_s": None if job["first_iteration_at"] is None else job["first_iteration_at"] - job["started_at"],
        "iterations": iterations, "target_loss": job["target_loss"], "final_loss": job["final_loss"],
        "phases": _phases(repo, job, end),
        "segments": [{k: v for k, v in seg.items() if k != "knobs"} for seg in segments],
        "settings_table": _settings_table(repo, segments),
        "reconfigurations": moves, "decisions": decisions,
        "tuning_overhead_s": overhead,
        "tuning_overhead_fraction": overhead / completion if overhead is not None and completion else None,
        "eta_accuracy": _eta_accuracy(repo, job, end),
        "eta_earlier_runs": _eta_earlier_runs(repo, job),
        "checkpoints": list(repo.rows("select step, path, kind, cost_s from checkpoints where job_id = ? order by step",
                                      (job_id,))),
        "evaluations": _evaluations(repo, job_id),
        "signature": json.loads(job["signature"]) if job.get("signature") else None,
        "resumes": list(repo.rows("select step, lost_steps, gap_s, checkpoint from resumes where job_id = ? "
                                  "order by resumed_at", (job_id,))),
        "inherited": list(repo.rows("select from_job_id as job_id, name, distance, triples, gp_fit, start "
                                    "from inheritances where job_id = ? order by distance, from_job_id", (job_id,))),
        "node_losses": list(repo.rows("select step, node, address, role, cause, action from node_losses "
                                      "where job_id = ? order by step", (job_id,))),
        "node_joins": list(repo.rows("select step, node, address from node_joins where job_id = ? order by step",
                                     (job_id,))),
        "cluster_nodes": len(json.loads(job["cluster"])) if job["cluster"] else None,
        "host": job["host"], "tf_version": job["tf_version"], "python": job["python"],
    }


def _evaluations(repo: Repository, job_id: str) -> list[dict[str, Any]]:
    by_step: dict[int, dict[str, Any]] = {}
    for row in repo.rows("select step, metric, value, cost_s from evaluations where job_id = ? order by step, metric",
                         (job_id,)):
        entry = by_step.setdefault(row["step"], {"step": row["step"], "metrics": {}, "cost_s": row["cost_s"]})
        entry["metrics"][row["metric"]] = row["value"]
    return list(by_step.values())


def _fmt(value: Any, spec: str = ".4g", missing: str = "-") -> str:
    return missing if value is None else format(value, spec)


def inherited_text(sources: list[dict[str, Any]]) -> str:
    """What a tuned job's tuner started from: ``12 observations from 2 jobs: ID (Name, distance 0.00, 9), ...``."""
    if not sources:
        return "nothing (no earlier job in this repository with a similar workload)"
    count = sum(s["triples"] for s in sources)
    listed = ", ".join(f"{s['job_id']} ({s['name']}, distance {s['distance']:.2f}, {s['triples']}"
                       f"{', and its GP fit' if s.get('gp_fit') else ''}"
                       f"{'; started on its best setting' if s.get('start') else ''})" for s in sources)
    return f"{count} observation{'s' if count != 1 else ''} from {len(sources)} job{'s' if len(sources) != 1 else ''}: {listed}"


def job_text(report: dict[str, Any]) -> str:
    """One job's report (from :func:`collect`) as text."""
    r = report
    lines = [f"job {r['id']} ({r['name']}, {r['mode']})"]
    status = STATUS_WORDS.get(r["status"], r["status"])
    lines.append(f"  status:          {status}: {r['stop_reason'] or ''}".rstrip())
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["started_at"]))
    if r["completion_time_s"] is not None:
        lines.append(f"  completion time: {r['completion_time_s']:.1f} s (started {started})")
    else:
        lines.append(f"  completion time: - (started {started}, not finished)")
    if r["first_iteration_s"] is not None:
        lines.append(f"  first iteration: {r['first_iteration_s']:.1f} s after run()")
    lines.append(f"  iterations:      {r['iterations']}")
    if r["signature"] is not None:
        lines.append(f"  workload:        {Signature.from_dict(r['signature']).describe()}")
    if r["tuned"]:
        lines.append(f"  inherited:       {inherited_text(r['inherited'])}")
    lines.append(f"  target loss:     {_fmt(r['target_loss'], 'g')}    final loss: {_fmt(r['final_loss'])}"
                 " (smoothed)")
    lines.append("  time in phases:  " + ", ".join(
        f"{p['phase']} {_fmt(p['duration_s'], '.1f')} s" for p in r["phases"]))
    lines.extend(_segment_lines(r["segments"]))
    lines.extend(_settings_lines(r["settings_table"]))
    lines.extend(_tuning_lines(r))
    lines.extend(_eta_lines(r))
    lines.extend(_model_lines(r))
    if r["cluster_nodes"]:
        lost = f", {len(r['node_losses'])} lost" if r["node_losses"] else ""
        joined = f", {len(r['node_joins'])} joined" if r["node_joins"] else ""
        lines.append(f"  cluster:         {r['cluster_nodes']} nodes{joined}{lost}")
    lines.extend(f"  node joined:     at step {e['step']}: node {e['node']} ({e['address']})" for e in r["node_joins"])
    lines.extend(f"  node lost:       at step {e['step']}: {e['cause']} (a {e['role']} node); {e['action']}"
                 for e in r["node_losses"])
    lines.append(f"  host:            {r['host']}, TensorFlow {r['tf_version']}, Python {r['python']}")
    return "\n".join(lines)


def _model_lines(r: dict[str, Any]) -> list[str]:
    lines = [f"  resumed:         at step {e['step']}, {e['lost_steps']} iterations lost, after a gap of "
             f"{e['gap_s']:.1f} s (from {e['checkpoint']})" for e in r["resumes"]]
    for e in r["evaluations"]:
        shown = ", ".join(f"{name} {value:.4g}" for name, value in e["metrics"].items())
        lines.append(f"  evaluated:       {shown} (held-out data, step {e['step']}; took {_fmt(e['cost_s'], '.1f')} s)")
    if r["checkpoints"]:
        last = r["checkpoints"][-1]
        lines.append(f"  model:           {last['path']} (step {last['step']}; "
                     f"{len(r['checkpoints'])} checkpoint{'s' if len(r['checkpoints']) > 1 else ''} written)")
    return lines


def _segment_lines(segments: list[dict[str, Any]]) -> list[str]:
    lines = ["  settings used:"]
    if not any(seg["iterations"] for seg in segments):
        return lines + ["    (none: the job stopped before its first iteration)"]
    lines.append("    (s/iter: wall time per global iteration; exec s: mean time of one worker's session.run)")
    lines.append(f"    {'#':>3} {'phase':<9} {'steps':>15} {'iters':>7} {'s/iter':>8} {'exec s':>8} "
                 f"{'loss start':>10} {'loss end':>9}  setting")
    for seg in segments:
        steps = f"{_fmt(seg['first_step'], 'd')}-{_fmt(seg['last_step'], 'd')}"
        lines.append(
            f"    {seg['segment']:>3} {seg['phase'] or '':<9} {steps:>15} {seg['iterations']:>7} "
            f"{_fmt(seg['wall_time_per_iteration_s'], '.4f'):>8} {_fmt(seg['mean_exec_time_s'], '.4f'):>8} "
            f"{_fmt(seg['start_loss']):>10} {_fmt(seg['end_loss']):>9}"
            f"  {seg['setting'] or seg['setting_id']}"
        )
    return lines


def _settings_lines(table: dict[str, Any]) -> list[str]:
    """Table IV as text: knob rows, a column per setting; a value that differs from the initial one is starred."""
    if len(table["columns"]) < 2:
        return []
    width = max(12, *(len(c["label"]) + 1 for c in table["columns"]))
    lines = ["  settings compared (Table IV; * differs from the initial setting):",
             f"    {'knob':<36}" + "".join(f"{c['label']:>{width}}" for c in table["columns"]),
             f"    {'s/iter (all its segments)':<36}" + "".join(
                 f"{_fmt(c['wall_time_per_iteration_s'], '.4f'):>{width}}" for c in table["columns"])]
    for row in table["rows"]:
        first = row["values"][0]
        cells = [f"{'' if v == first else '*'}{v}" for v in row["values"]]
        lines.append(f"    {row['knob']:<36}" + "".join(f"{c:>{width}}" for c in cells))
    return lines


def _tuning_lines(r: dict[str, Any]) -> list[str]:
    """Every decision of a tuned job, with EI against cost, and every reconfiguration with its measured cost."""
    lines = []
    if r["tuning_overhead_s"] is not None and r["tuning_overhead_fraction"] is not None:
        lines.append(f"  tuning overhead: {r['tuning_overhead_s']:.1f} s "
                     f"({100 * r['tuning_overhead_fraction']:.1f}% of the job; GP fits and EI, run beside the training)")
    if r["decisions"]:
        lines.append("  decisions:       (step, loss, EI / switch cost in s: what was chosen and why)")
    for d in r["decisions"]:
        if d["phase"] == "untuned":  # the tuner failed; the job went on without it
            lines.append(f"    {d['step']:>7} {_fmt(d['loss'], '.4f'):>7}  {d['reason']}")
            continue
        verdict = "switch to" if d["applied"] else "stay; best other"
        lines.append(f"    {d['step']:>7} {_fmt(d['loss'], '.4f'):>7}  {d['phase']:<9} "
                     f"EI {_fmt(d['expected_improvement_s'], '.3g'):>6} / {_fmt(d['cost_s'], '.3g'):>6}  "
                     f"{verdict} {d['candidate'] or '-'}: {d['reason']}")
    moves = r["reconfigurations"]
    if moves:
        total = sum(m["cost_s"] or 0 for m in moves)
        lines.append(f"  reconfigurations: {len(moves)}, {total:.1f} s lost in all "
                     "(cost: time the switch lost the job; 'during': iterations trained while it was made)")
        for m in moves:
            lines.append(f"    step {m['step']:>7}  {m['types']:<12} {m['technique']:<13} {_fmt(m['cost_s'], '.2f'):>6} s  "
                         f"{(m['bytes_moved'] or 0) / 1e6:6.1f} MB  during {_fmt(m['iterations_during'], 'd'):>4}  "
                         f"{m['from'] or '?'} -> {m['to'] or '?'}")
    return lines


def eta_unmeasured(r: dict[str, Any]) -> list[float]:
    """The fractions of a converged job's training time with no estimate before them (the first came later)."""
    measured = {e["fraction"] for e in r["eta_accuracy"]}
    return [f for f in ETA_FRACTIONS if f not in measured]


def _eta_lines(r: dict[str, Any]) -> list[str]:
    if not r["eta_accuracy"]:
        if r["status"] == "converged":
            return ["  ETA accuracy:    - (no estimate recorded)"]
        return ["  ETA accuracy:    - (the job did not converge, so its remaining time is unknown)"]
    took = f"; it took {r['eta_earlier_runs']} earlier runs of the job" if r.get("eta_earlier_runs") else ""
    lines = [f"  ETA accuracy:    (estimated vs actual remaining time{took})"]
    lines += [f"    at {100 * f:.0f}%: no estimate yet" for f in eta_unmeasured(r)]
    for e in r["eta_accuracy"]:
        lines.append(f"    at {100 * e['fraction']:.0f}% (step {e['step']}): {e['estimated_remaining_s']:.1f} s vs "
                     f"{e['actual_remaining_s']:.1f} s ({_fmt(e['error'] and 100 * e['error'], '+.0f')}%, "
                     f"{e['estimator']})")
    return lines


def no_jobs_message(repo: Repository, job_name: str | None) -> str:
    return f"no job named {job_name!r} in {repo.path}" if job_name is not None else f"no jobs in {repo.path}"


def report_text(repo: Repository, reports: list[dict[str, Any]], job_name: str | None = None) -> str:
    """The text report of ``reports`` (:func:`collect` of each job asked for, ``job_name`` or all)."""
    if not reports:
        return no_jobs_message(repo, job_name)
    return "\n\n".join(job_text(r) for r in reports)


def report_json(repo: Repository, reports: list[dict[str, Any]]) -> dict[str, Any]:
    """The JSON report: ``{"report_version", "db", "jobs": [...]}`` (each job: :data:`JSON_SCHEMA`)."""
    return {"report_version": REPORT_VERSION, "db": repo.path, "jobs": reports}


def compare(repo: Repository, names: list[str]) -> dict[str, Any]:
    """Jobs side by side (each name is a job id, or a name: all its jobs), with completion-time ratios to the first."""
    jobs = []
    for name in names:
        found = repo.jobs(name)
        if not found:
            raise ConfigurationError(f"--compare takes job ids or names in {repo.path}, got {name!r}: no such job")
        jobs.extend(j for j in found if j["id"] not in {k["id"] for k in jobs})
    base = jobs[0]["completion_time_s"]
    rows = []
    for job in jobs:
        t = job["completion_time_s"]
        rows.append({"id": job["id"], "name": job["name"], "tuned": bool(job["tuned"]), "status": job["status"],
                     "completion_time_s": t, "iterations": job["iterations"], "final_loss": job["final_loss"],
                     "ratio_to_first": t / base if t and base else None})
    return {"baseline": jobs[0]["id"], "jobs": rows}


def compare_text(comparison: dict[str, Any]) -> str:
    lines = [f"{'job':<40} {'tuned':>5} {'status':<15} {'completion':>11} {'iters':>7} {'vs first':>8}"]
    for row in comparison["jobs"]:
        lines.append(f"{row['id']:<40} {'yes' if row['tuned'] else 'no':>5} {row['status']:<15} "
                     f"{_fmt(row['completion_time_s'], '.1f'):>9} s {_fmt(row['iterations'], 'd'):>7} "
                     f"{_fmt(row['ratio_to_first'], '.2f'):>7}x")
    lines.append(f"(vs first: completion time / that of {comparison['baseline']}; below 1 is faster)")
    return "\n".join(lines)
