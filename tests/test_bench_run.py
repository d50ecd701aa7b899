"""The paper-evaluation benchmark end to end: ``benchmarks/paper.py`` on real clusters, at its smallest."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from test_bench import BENCH


def test_the_benchmark_runs_a_workload_end_to_end_and_writes_every_table(tmp_path):
    """Smoke mode: one tuned seed and one random fixed setting of the LogR example at its demo size (about 25 s)."""
    out = subprocess.run([sys.executable, BENCH, "--mode", "smoke", "--out", str(tmp_path)], capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert out.returncode == 0, out.stderr[-2000:]
    (md,) = [p for p in os.listdir(tmp_path) if p.endswith("-smoke.md")]
    text = (tmp_path / md).read_text()
    for heading in ("## Completion time (Fig. 5) and ratios", "## Against the targets",
                    "## Iterations and time per iteration (Table III)", "## Settings (Table IV)",
                    "## Reconfigurations (Table V)", "## Estimator rank (Table VI"):
        assert heading in text
    result = json.loads((tmp_path / md.replace(".md", ".json")).read_text())
    logr = result["workloads"]["logr"]
    assert [r["status"] for r in logr["tuned"]] == ["converged"] and len(logr["fixed"]) == 1
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


def test_the_checkpoint_cost_benchmark_measures_both_ways_side_by_side(capsys):
    sys.path.insert(0, os.path.join(os.path.dirname(BENCH)))
    import checkpoint_cost

    results = checkpoint_cost.main(["--workloads", "logr", "--seconds", "7", "--every", "0.5", "--repeats", "1"])
    logr = results["logr"]
    assert logr["per_iteration_without_s"] > 0 and logr["per_iteration_with_s"] > 0 and logr["checkpoints_per_run"] >= 2
    assert logr["slowdown"] == logr["per_iteration_with_s"] / logr["per_iteration_without_s"] - 1
    assert logr["checkpoint_s"] > 0 and logr["evaluation_s"] == 0.0  # the LogR has no held-out data
    assert "< 2% of the job's time" in capsys.readouterr().out
