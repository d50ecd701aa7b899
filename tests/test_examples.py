"""Each example runs on the shared cluster (300 steps; full runs to the target are in the closing notes)."""

from __future__ import annotations

import importlib
import os
import sqlite3
import statistics
import sys

import pytest

EXAMPLES = os.path.join(os.path.dirname(__file__), os.pardir, "examples")


@pytest.fixture(scope="module")
def examples():
    sys.path.insert(0, os.path.abspath(EXAMPLES))
    yield {name: importlib.import_module(name) for name in ("logr", "svm", "cnn", "mlp")}
    sys.path.remove(os.path.abspath(EXAMPLES))


@pytest.mark.parametrize("name, cls, args", [("logr", "LogR", ()), ("svm", "SVM", ()), ("cnn", "CNN", ("sklearn",)),
                                             ("mlp", "MLP", ())])
def test_example_trains(examples, cluster, db_path, name, cls, args):
    job = getattr(examples[name], cls)(*args)
    result = job.run(db=db_path, cluster=cluster, max_steps=300, quiet=True)
    assert result.status in ("stopped", "converged") and result.iterations <= 300
    n = result.iterations
    rows = sqlite3.connect(db_path).execute("select step, loss from iterations").fetchall()
    first = [loss for step, loss in rows if step <= 30]
    last = [loss for step, loss in rows if step > n - 30]
    # It learns: the last 30 losses lie below the first 30 by more than their noise. A fixed ratio failed
    # about one run in 25 on LogR, whose 30-batch mean moves by 0.007 and drops by 0.035-0.05 in 300 steps.
    drop = statistics.mean(first) - statistics.mean(last)
    noise = (statistics.variance(first) / len(first) + statistics.variance(last) / len(last)) ** 0.5
    assert drop > 3 * noise, (drop, noise)


def test_logr_parameters_are_partitioned_over_the_ps_nodes(examples, cluster, db_path):
    from tfonline._runner import Runner

    runner = Runner(examples["logr"].LogR(), {"ps": 2, "worker": 1}, db=db_path, mode="async", cluster=cluster,
                    nodes=None, seed=0, max_steps=3, max_seconds=None, quiet=True)
    runner.run()
    blocks = [p for p in runner.partitions if p.name.startswith("w/part_")]
    assert len(blocks) == 2 and sum(p.shape[0] for p in blocks) == 1 << 20  # 3 nodes: 1 or 2 ps, so 2 blocks
    devices = [v.device for v in runner.graphs[0].model_variables if v.name.startswith("w/part_")]
    assert devices.count("/job:node/task:0/device:CPU:0") == devices.count("/job:node/task:1/device:CPU:0") == 1


def test_example_command_line(examples, tmp_path, capsys):
    with pytest.raises(SystemExit):
        examples["logr"].main(["--help"])
    out = capsys.readouterr().out
    assert "--libsvm" in out and "--ps" in out and "--mode" in out and "--tune" in out
