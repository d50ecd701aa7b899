"""Each example runs on the shared cluster (300 steps; full runs to the target are in the closing notes)."""

from __future__ import annotations

import importlib
import os
import sqlite3
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
    first, last = sqlite3.connect(db_path).execute(
        "select avg(case when step <= 30 then loss end), avg(case when step > ? then loss end) from iterations",
        (n - 30,),
    ).fetchone()
    assert last < 0.95 * first  # it learns


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
