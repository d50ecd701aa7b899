"""The trained model kept: a job's final checkpoint and its metrics, on a real cluster."""

from __future__ import annotations

import os
import sqlite3
import sys

import numpy as np
import pytest
import tensorflow as tf

from jobs import TinyLogR
from tfonline.cli import main
from tfonline.data import hashed_sparse_dataset

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "examples"))
from cnn import CNN  # noqa: E402


def test_the_restored_cnn_gives_the_test_accuracy_the_clusters_parameters_gave(cluster, db_path, capsys):
    """Two ps nodes, so the CNN's largest layer (fc1) is cut in two blocks; the checkpoint joins them."""
    job = CNN()
    result = job.run(setting={"ps": 2, "worker": 1}, db=db_path, cluster=cluster, max_steps=150, patience=None,
                     quiet=True)
    assert result.status == "converged" or result.iterations == 150
    accuracy = result.metrics["accuracy"]  # measured on a node, on the parameters where they lived
    assert accuracy > 0.5  # a trained model: chance is 0.1
    reader = tf.train.load_checkpoint(result.checkpoint)
    shapes = reader.get_variable_to_shape_map()
    assert shapes["fc1"] == [3136, 256] and shapes["fc1/Momentum"] == [3136, 256]
    assert not [name for name in shapes if "part_" in name or name.startswith("tfonline")]
    assert reader.get_tensor("global_step") == result.iterations
    with job.restore(result) as model:
        restored = model.evaluate()
    assert restored["accuracy"] == pytest.approx(accuracy, abs=1e-9)  # 1,000 digits: one more right is 0.001
    assert restored["loss"] == pytest.approx(result.metrics["loss"], rel=1e-5)
    con = sqlite3.connect(db_path)
    rows = con.execute("select metric, value from evaluations where job_id = ? and step = ?",
                       (result.job_id, result.iterations)).fetchall()
    assert dict(rows) == pytest.approx(result.metrics)
    assert con.execute("select path, kind from checkpoints where job_id = ?", (result.job_id,)).fetchall() == [
        (result.checkpoint, "final")]
    assert main(["report", db_path]) == 0
    out = capsys.readouterr().out
    assert f"evaluated:       accuracy {accuracy:.4g}, loss" in out, out
    assert f"model:           {result.checkpoint} (step {result.iterations}; 1 checkpoint written)" in out, out


class EvaluatedLogR(TinyLogR):
    """TinyLogR with held-out batches; its metric is the loss. Its bias is a ``tf.Variable``."""

    def eval_input_fn(self):
        return hashed_sparse_dataset(0, 1, batch_size=50, fields=8, categories_per_field=50, hash_bits=self.hash_bits,
                                     signal=3.0, num_batches=7, seed=99)


def test_a_sync_jobs_checkpoint_is_beside_its_repository_whole_and_without_accumulators(cluster, db_path):
    job = EvaluatedLogR(hash_bits=17)  # w is 512 KiB: a block per ps node
    result = job.run(setting={"ps": 2, "worker": 1}, mode="sync", db=db_path, cluster=cluster, max_steps=60,
                     patience=None, quiet=True)
    directory = os.path.join(os.path.dirname(db_path), "runs.models", result.job_id)
    assert result.checkpoint == os.path.join(directory, f"model.ckpt-{result.iterations}")
    reader = tf.train.load_checkpoint(result.checkpoint)
    assert reader.get_variable_to_shape_map() == {"w": [1 << 17, 1], "w/Adagrad": [1 << 17, 1], "b": [],
                                                  "b/Adagrad": [], "global_step": []}
    assert np.count_nonzero(reader.get_tensor("w")) > 100  # trained rows, in both blocks
    assert np.count_nonzero(reader.get_tensor("w")[1 << 16:]) > 0 and np.count_nonzero(reader.get_tensor("w")[:1 << 16])
    with job.restore(directory) as model:
        assert model.evaluate()["loss"] == pytest.approx(result.metrics["loss"], rel=1e-6)
    con = sqlite3.connect(db_path)
    assert con.execute("select model_dir from jobs where id = ?", (result.job_id,)).fetchone() == (directory,)
