"""The paper-evaluation benchmark end to end: ``benchmarks/paper.py`` on real clusters, at its smallest, and its
simulated section on a small modelled cluster, and Table VI from kept ratings (no TensorFlow cluster, but seconds
of GP and estimator fits: not in ``-m fast``)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import pytest

from test_bench import BENCH, _bench_module, paper  # noqa: F401 (paper: the fixture)


def _sitting(tmp_path, *extra):
    return subprocess.run([sys.executable, BENCH, "--mode", "smoke", "--out", str(tmp_path), "--stop-after", "0",
                           *extra], capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))


def test_the_benchmark_runs_a_workload_end_to_end_and_writes_every_table(tmp_path):
    """Smoke mode: one tuned seed and one random fixed setting of the LogR example at its demo size (about 25 s),
    in two sittings of one run each (``--stop-after 0``): the second takes the tuned run from the journal."""
    out = _sitting(tmp_path)
    assert out.returncode == 75, out.stderr[-2000:]
    (journal,) = [p for p in os.listdir(tmp_path) if p.endswith("-smoke-runs.jsonl")]
    lines = [json.loads(line) for line in (tmp_path / journal).read_text().splitlines()]
    assert [line.get("run") for line in lines[2:-1]] == ["logr/tuned/0"] and "sitting_ended" in lines[-1]
    assert lines[1]["sitting"] == 1 and lines[1]["revision"]  # the code it ran on
    assert out.stdout.strip().splitlines()[-1].endswith(
        f"stopped after 0 min: 1 run kept in {tmp_path / journal}; go on with: python benchmarks/paper.py "
        f"--mode smoke --out {tmp_path} --resume")
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".md")]
    out = _sitting(tmp_path, "--resume")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "(sitting 2): 1 run kept" in out.stdout and "logr/tuned/0, from an earlier sitting" in out.stdout
    (md,) = [p for p in os.listdir(tmp_path) if p.endswith("-smoke.md")]
    text = (tmp_path / md).read_text()
    for heading in ("## Completion time (Fig. 5) and ratios", "## Against the targets",
                    "## Iterations and time per iteration (Table III)", "## Settings (Table IV)",
                    "## Reconfigurations (Table V)", "## Estimator rank (Table VI"):
        assert heading in text
    result = json.loads((tmp_path / md.replace(".md", ".json")).read_text())
    logr = result["workloads"]["logr"]
    assert [r["status"] for r in logr["tuned"]] == ["converged"] and len(logr["fixed"]) == 1
    assert logr["tuned"][0] == lines[2]["row"] and result["sittings"] == 2
    for row in logr["tuned"] + logr["fixed"]:  # what else the machine did while each ran (/proc/stat)
        load = row["machine"]
        assert set(load) == {"steal", "idle", "others", "niced"} and all(0 <= v <= 1 for v in load.values())
    assert "- logr: 2 of 2 runs recorded; at most " in text
    assert f"over 2 sittings at {lines[1]['revision']} (the runs kept" in text
    with sqlite3.connect(tmp_path / md.replace(".md", "-tuned.db")) as conn:  # the tuned run was not run again
        assert conn.execute("select id from jobs").fetchall() == [(logr["tuned"][0]["job_id"],)]
    c, ratios = logr["summary"]["completion_time_s"], logr["summary"]["ratios"]
    assert c["best"] <= c["average"] <= c["worst"] and c["tfonline"] == logr["tuned"][0]["completion_time_s"]
    assert ratios["tfonline_over_best"] == c["tfonline"] / c["best"]
    assert f"| logr | tfonline / Best | {ratios['tfonline_over_best']:.2f}x | <= 1.10x |" in text
    assert os.path.exists(tmp_path / md.replace(".md", "-tuned.db"))
    # The figures: Fig. 5 and LogR's loss against wall time, as PNG files named in the tables.
    for figure in ("-fig5.png", "-loss-logr.png"):
        path = tmp_path / md.replace(".md", figure)
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.name in result["figures"]
        assert f"![{path.name}]({path.name})" in text
    # Each run kept its loss curve (and the fixed run its estimator ratings) beside the journal, so the figures
    # need no repository: on another machine the checkout has the journal, and git ignores the repositories.
    traces = [json.loads(line) for line in (tmp_path / journal.replace("-runs.", "-traces.")).read_text().splitlines()]
    assert [t["run"] for t in traces] == ["logr/tuned/0", "logr/fixed/0"]
    assert traces[0]["traces"]["curve"]["job_id"] == logr["tuned"][0]["job_id"]
    if logr["fixed"][0]["status"] == "converged":
        ratings = traces[1]["traces"]["ratings"]
        assert set(ratings) == {"hogwild", "loss-curve", "eta"}
        # no earlier run of the job in the fixed runs' repository: the ETA was the answers it recorded
        assert ratings["eta"]["earlier_runs"] == 0
        assert ratings["eta"]["relative_error"] == ratings["eta"]["recorded_error"]
    assert ("| the ETA as the runs showed it: hogwild's recorded answers with the job's earlier runs (the answers "
            "alone; runs rated, with a prior) |") in text
    stem = str(tmp_path / md[: -len(".md")])
    for path in (stem + "-tuned.db", stem + "-fixed.db", stem + "-loss-logr.png"):
        os.remove(path)
    sys.path.insert(0, os.path.dirname(BENCH))
    try:
        import figures
    finally:
        sys.path.remove(os.path.dirname(BENCH))
    assert stem + "-loss-logr.png" in figures.draw(result, stem)


def test_the_checkpoint_cost_benchmark_measures_both_ways_side_by_side(capsys):
    sys.path.insert(0, os.path.join(os.path.dirname(BENCH)))
    import checkpoint_cost

    # 600 steps, however long the start-up takes (9 s from the job's start left no checkpoint in CI,
    # 2026-11-27, under the full suite's load): 3.5-10 ms each here, 2-6 s, so 3 or more checkpoints every 0.5 s
    results = checkpoint_cost.main(["--workloads", "logr", "--steps", "600", "--every", "0.5", "--repeats", "1"])
    logr = results["logr"]
    assert logr["per_iteration_without_s"] > 0 and logr["per_iteration_with_s"] > 0 and logr["checkpoints_per_run"] >= 1
    assert logr["slowdown"] == logr["per_iteration_with_s"] / logr["per_iteration_without_s"] - 1
    assert logr["checkpoint_s"] > 0 and logr["evaluation_s"] == 0.0  # the LogR has no held-out data
    assert "< 2% of the job's time" in capsys.readouterr().out


def test_a_simulated_workload_fills_the_same_tables(paper, tmp_path, monkeypatch):
    """The simulated section runs the real tuner on a modelled cluster (here a small one, for speed) and
    reports it in the real workloads' form, tuned rows read back from its repository."""
    import simulated as sim

    monkeypatch.setattr(paper, "SIMULATED", {"paper-sim": lambda: sim.stale_job(0).workload})
    monkeypatch.setattr(paper, "SIMULATED_FIXED", 6)
    w = paper._simulated("paper-sim", 2, str(tmp_path / "bench"), log=lambda message: None)
    assert w["simulated"] and len(w["fixed"]) == 6 and len(w["tuned"]) == 2
    assert all(t["status"] == "converged" and t["iterations"] > 0 for t in w["tuned"])
    c = w["summary"]["completion_time_s"]
    assert c["best"] <= c["average"] <= c["worst"] and c["tfonline"] > 0
    assert [label for label, *_ in paper._targets(w)] == [
        "share of the Average -> Best gain captured", "tfonline / Best", "Average / tfonline"]
    result = {"mode": "quick", "date": "2026-11-23", "fixed_settings": 2, "seeds": 2, "wall_s": 60.0, "cap_factor": 10,
              "machine": {"cores": 2, "memory_gib": 24, "platform": "p", "python": "3.11", "tensorflow": "2",
                          "nodes": 4}, "workloads": {"paper-sim": w}}
    text = paper.markdown(result)
    assert "| paper-sim | 0 runs, segments of - it | simulated fixed runs keep no iterations |" in text
    assert " of 6 | -; " in text  # R is the simulation's own; simulated runs have no start-up of their own


def test_table_vi_from_the_ratings_each_run_kept_is_the_rating_of_the_runs_together(paper, tmp_path):
    """Each fixed run is rated when it ends, and the journal keeps it; the workload's Table VI puts the ratings
    together, as :func:`estimate_quality` rates the runs in one go."""
    import json

    from test_estimate_quality import _fake_runs
    from tfonline.estimator._quality import estimate_quality, load_runs
    from tfonline.repository import Repository

    db = str(tmp_path / "fixed.db")
    _fake_runs(db, per_iteration_s=(0.02, 0.01, 0.04, 0.03, 0.015), alpha=400.0, seed=3)  # 1,700 steps each
    traces = json.loads(json.dumps([{"ratings": paper._ratings(db, f"run{i}")} for i in range(5)]))  # as kept
    table = paper._table_vi(traces + [None])  # and one run kept without ratings
    assert table["runs"] == 5 and table["unrated"] == 1 and table["segment"] == paper.RANK_SEGMENT
    runs = load_runs(Repository(db, create=False), "Fake")
    for name in ("hogwild", "loss-curve"):
        together = estimate_quality(runs, name, paper.RANK_SEGMENT)
        assert table[name]["rank"] == together.rank and table[name]["picks"] == together.picks > 10
        assert table[name]["median_relative_error"] == pytest.approx(
            {str(k): v for k, v in together.median_relative_error.items()})
    assert paper._table_vi(traces[:1]) == {"runs": 1, "why": "fewer than 2 converged fixed runs"}
    assert paper._ratings(db, "failed") == {}  # a run that did not converge is not rated


def test_full_mode_trains_every_workload_to_a_lower_target_than_quick_mode():
    """The workloads import their examples, and so TensorFlow (about 12 s on a slow machine): not in ``-m fast``."""
    workloads = _bench_module("workloads")
    for name in workloads.SIZED:
        quick, full = workloads.job(name, "quick").target_loss, workloads.job(name, "full").target_loss
        assert full < quick, f"{name}: full mode's target {full} is not below quick mode's {quick}"
