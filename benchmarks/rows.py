"""A benchmark run's figures, read back from the repository it ran in (:func:`job_row`): the rows of the
paper benchmark's tables, of the sweep and multi-host benchmarks, and of the full benchmark's speed check."""

from __future__ import annotations

from tfonline.repository import Repository


def job_row(db: str, job_id: str) -> dict:
    """Job ``job_id``'s figures from its repository ``db``."""
    repo = Repository(db, create=False)
    try:
        job = repo.jobs(job_id)[0]
        first_last = next(repo.rows("select min(wall_time) as a, max(wall_time) as b, count(*) as n, "
                                    "(select short from settings s join iterations j on j.setting_id = s.id "
                                    " where j.job_id = ? group by s.id order by count(*) desc limit 1) as most "
                                    "from iterations where job_id = ?", (job_id, job_id)))
        moves = list(repo.rows("select technique, cost_s from reconfigurations where job_id = ?", (job_id,)))
    finally:
        repo.db.conn.close()
    n = first_last["n"]
    return {
        "job_id": job_id, "status": job["status"], "completion_time_s": job["completion_time_s"],
        "startup_s": None if job["first_iteration_at"] is None else job["first_iteration_at"] - job["started_at"],
        "iterations": job["iterations"],
        "time_per_iteration_s": (first_last["b"] - first_last["a"]) / (n - 1) if n and n > 1 else None,
        "final_loss": job["final_loss"], "most_used_setting": first_last["most"],
        "reconfigurations": len(moves), "reconfiguration_cost_s": sum(m["cost_s"] or 0.0 for m in moves),
        "tuning_overhead_s": job["tuning_overhead_s"],
        "reconfiguration_costs_s": [m["cost_s"] for m in moves if m["cost_s"] is not None],
    }
