"""What happened to each job in a repository, as text. Never imports TensorFlow."""

from __future__ import annotations

import json
import time
from typing import Any

from tfonline.repository import Repository

STATUS_WORDS = {
    "converged": "converged",
    "stopped": "stopped at a limit",
    "failed": "failed",
    "interrupted": "interrupted",
    "data_exhausted": "data exhausted",
    "running": "running",
}


def segment_rows(repo: Repository, job_id: str) -> list[dict[str, Any]]:
    """Each segment with its statistics, computed from its iterations."""
    return list(repo.rows(
        """
        select s.segment, s.setting_id, s.phase, st.short, st.knobs,
               count(i.step) as iterations, min(i.step) as first_step, max(i.step) as last_step,
               avg(i.exec_time_s) as mean_exec_time_s,
               case when count(i.step) > 1
                    then (max(i.wall_time) - min(i.wall_time)) / (count(i.step) - 1) end as wall_time_per_iteration_s,
               (select loss from iterations where job_id = s.job_id and segment = s.segment
                 order by step limit 1) as start_loss,
               (select smoothed_loss from iterations where job_id = s.job_id and segment = s.segment
                 order by step desc limit 1) as end_loss
        from segments s
        left join settings st on st.id = s.setting_id
        left join iterations i on i.job_id = s.job_id and i.segment = s.segment
        where s.job_id = ?
        group by s.segment order by s.segment
        """,
        (job_id,),
    ))


def _fmt(value: Any, spec: str = ".4g", missing: str = "-") -> str:
    return missing if value is None else format(value, spec)


def job_text(repo: Repository, job: dict[str, Any]) -> str:
    lines = [f"job {job['id']} ({job['name']}, {job['mode']})"]
    status = STATUS_WORDS.get(job["status"], job["status"])
    lines.append(f"  status:          {status}: {job['stop_reason'] or ''}".rstrip())
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(job["started_at"]))
    if job["completion_time_s"] is not None:
        lines.append(f"  completion time: {job['completion_time_s']:.1f} s (started {started})")
    else:
        lines.append(f"  completion time: - (started {started}, not finished)")
    if job["first_iteration_at"]:
        lines.append(f"  first iteration: {job['first_iteration_at'] - job['started_at']:.1f} s after run()")
    iterations = job["iterations"]
    if iterations is None:  # still running: count what is there
        iterations = next(repo.rows("select count(*) as n from iterations where job_id = ?", (job["id"],)))["n"]
    lines.append(f"  iterations:      {iterations}")
    lines.append(f"  target loss:     {_fmt(job['target_loss'], 'g')}    final loss: {_fmt(job['final_loss'])}"
                 " (smoothed)")
    segments = segment_rows(repo, job["id"])
    lines.append("  settings used:")
    if not segments:
        lines.append("    (none: the job stopped before its first iteration)")
    header = (f"    {'#':>3} {'phase':<8} {'steps':>15} {'iters':>7} {'s/iter':>8} {'exec s':>8} "
              f"{'loss start':>10} {'loss end':>9}  setting")
    if segments:
        lines.append("    (s/iter: wall time per global iteration; exec s: mean time of one worker's session.run)")
        lines.append(header)
    for seg in segments:
        steps = f"{_fmt(seg['first_step'], 'd')}-{_fmt(seg['last_step'], 'd')}"
        lines.append(
            f"    {seg['segment']:>3} {seg['phase'] or '':<8} {steps:>15} {seg['iterations']:>7} "
            f"{_fmt(seg['wall_time_per_iteration_s'], '.4f'):>8} {_fmt(seg['mean_exec_time_s'], '.4f'):>8} "
            f"{_fmt(seg['start_loss']):>10} {_fmt(seg['end_loss']):>9}"
            f"  {seg['short'] or seg['setting_id']}"
        )
    lines.extend(_tuning_lines(repo, job))
    if job["cluster"]:
        lines.append(f"  cluster:         {len(json.loads(job['cluster']))} nodes")
    lines.append(f"  host:            {job['host']}, TensorFlow {job['tf_version']}, Python {job['python']}")
    return "\n".join(lines)


def _tuning_lines(repo: Repository, job: dict[str, Any]) -> list[str]:
    """Every decision of a tuned job, and every reconfiguration with its measured cost."""
    if not job.get("tuned"):
        return []
    lines = []
    phases = list(repo.rows("select phase, start_step from phases where job_id = ? order by start_step", (job["id"],)))
    if phases:
        lines.append("  phases:          " + ", ".join(f"{p['phase']} from step {p['start_step']}" for p in phases))
    if job["tuning_overhead_s"] is not None and job["completion_time_s"]:
        lines.append(f"  tuning overhead: {job['tuning_overhead_s']:.1f} s "
                     f"({100 * job['tuning_overhead_s'] / job['completion_time_s']:.1f}% of the job; "
                     "GP fits and EI, run beside the training)")
    decisions = list(repo.rows(
        """
        select d.step, d.phase, d.applied, d.reason, d.loss, s.short as candidate
        from decisions d left join settings s on s.id = d.candidate_setting_id
        where d.job_id = ? order by d.step
        """, (job["id"],)))
    if decisions:
        lines.append("  decisions:       (step, loss: what was chosen and why)")
    for d in decisions:
        verdict = "switch to" if d["applied"] else "stay; best other"
        lines.append(f"    {d['step']:>7} {_fmt(d['loss'], '.4f'):>7}  {d['phase']:<7} {verdict} "
                     f"{d['candidate'] or '-'}: {d['reason']}")
    moves = list(repo.rows("select step, types, technique, cost_s, bytes_moved from reconfigurations "
                           "where job_id = ? order by step", (job["id"],)))
    if moves:
        total = sum(m["cost_s"] or 0 for m in moves)
        lines.append(f"  reconfigurations: {len(moves)}, {total:.1f} s in all "
                     "(wall time from the last iteration before to the first after)")
        for m in moves:
            lines.append(f"    step {m['step']:>7}  {m['types']:<12} {m['technique']:<13} {_fmt(m['cost_s'], '.2f'):>6} s  "
                         f"{(m['bytes_moved'] or 0) / 1e6:.1f} MB")
    return lines


def report_text(repo: Repository, job_name: str | None = None) -> str:
    """The text report of every job in ``repo`` (or of the jobs named ``job_name``)."""
    jobs = repo.jobs(job_name)
    if not jobs:
        if job_name is not None:
            return f"no job named {job_name!r} in {repo.path}"
        return f"no jobs in {repo.path}"
    return "\n\n".join(job_text(repo, job) for job in jobs)
