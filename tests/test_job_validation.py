"""Bad jobs and bad options fail before any node starts, with one clear line."""

from __future__ import annotations

import math
import os
import sqlite3

import pytest
import tensorflow as tf
from conftest import node_processes
from jobs import TinyLogR

import tfonline
from tfonline.exceptions import ConfigurationError, JobDefinitionError, RepositoryError


def run_quick(job, db_path, **kwargs):
    before = node_processes(os.getpid())
    try:
        return job.run(db=db_path, quiet=True, **kwargs)
    finally:
        assert node_processes(os.getpid()) <= before  # nothing started is left over


class NoModel(tfonline.MLJobFramework):
    target_loss = 0.1

    def input_fn(self, shard, num_shards):
        return tf.data.Dataset.range(3)

    def optimizer_fn(self):
        return tf.compat.v1.train.GradientDescentOptimizer(0.1)


def test_missing_method(db_path):
    with pytest.raises(JobDefinitionError, match=r"NoModel must define model_fn\(self, features, labels\); it is missing"):
        run_quick(NoModel(), db_path)


class VectorLoss(TinyLogR):
    def model_fn(self, features, labels):
        indices, _ = features
        w = tf.compat.v1.get_variable("w", [1 << self.hash_bits, 1])
        return tf.reduce_sum(tf.nn.embedding_lookup(w, indices), axis=[1, 2])


class IntLoss(TinyLogR):
    def model_fn(self, features, labels):
        tf.compat.v1.get_variable("w", [4])
        return tf.constant(1, tf.int32)


class NotATensor(TinyLogR):
    def model_fn(self, features, labels):
        tf.compat.v1.get_variable("w", [4])
        return 0.5


class NotADataset(TinyLogR):
    def input_fn(self, shard, num_shards):
        return [1, 2, 3]


class NotPairs(TinyLogR):
    def input_fn(self, shard, num_shards):
        return tf.data.Dataset.range(10)


class WrongOptimizer(TinyLogR):
    def optimizer_fn(self):
        return "sgd"


class NoVariables(TinyLogR):
    def model_fn(self, features, labels):
        return tf.reduce_mean(labels)


class NoGradient(TinyLogR):
    def model_fn(self, features, labels):
        tf.compat.v1.get_variable("w", [4])
        return tf.reduce_mean(labels)


class UnknownShape(TinyLogR):
    def model_fn(self, features, labels):
        v = tf.Variable(tf.zeros([tf.shape(labels)[0]]), validate_shape=False, shape=tf.TensorShape(None))
        return tf.reduce_mean(v)


@pytest.mark.parametrize(
    "job, message",
    [
        (NoGradient(), r"model_fn's loss must depend on at least one trainable variable, got none"),
        (UnknownShape(), r"variables must have a fully known shape, got .* for Variable"),
        (VectorLoss(), r"model_fn must return a scalar float loss tensor, got shape \(32,\) dtype float32"),
        (IntLoss(), r"model_fn must return a scalar float loss tensor, got shape \(\) dtype int32"),
        (NotATensor(), r"model_fn must return a scalar float loss tensor, got float"),
        (NotADataset(), r"input_fn must return a tf.data.Dataset of \(features, labels\), got list"),
        (NotPairs(), r"input_fn's dataset must yield \(features, labels\) pairs, got single tensors"),
        (WrongOptimizer(), r"optimizer_fn must return a tf.compat.v1.train.Optimizer, got str"),
        (NoVariables(), r"model_fn must create at least one variable to train, got none"),
    ],
)
def test_bad_job_methods(job, message, db_path):
    with pytest.raises(JobDefinitionError, match=message):
        run_quick(job, db_path)
    assert sqlite3.connect(db_path).execute("select count(*) from jobs").fetchone()[0] == 0


@pytest.mark.parametrize("target, shown", [(0, "0"), (-1, "-1"), (math.nan, "nan"), ("0.3", "'0.3'"), (None, "None")])
def test_bad_target_loss(target, shown, db_path):
    job = TinyLogR()
    job.target_loss = target
    with pytest.raises(ConfigurationError, match=f"target_loss must be a number > 0, got {shown}"):
        run_quick(job, db_path)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"mode": "bsp"}, "mode must be one of async, sync, got 'bsp'"),
        ({"max_steps": 0}, "max_steps must be an integer >= 1 or None, got 0"),
        ({"max_seconds": -5}, "max_seconds must be a number > 0 or None, got -5"),
        ({"tune": True, "space": {"worker": [9]}}, r"knob worker must be in \[1, \d+\], got 9"),
        ({"setting": {"warp": 9}}, "unknown knob 'warp'; known knobs: ps, worker"),
        ({"setting": {"ps": 2, "worker": 2}, "nodes": 3}, r"ps \+ worker must be <= 3 \(the cluster's nodes\)"),
        ({"setting": {"intra_op_parallelism_threads": 0}}, r"intra_op_parallelism_threads must be in \[1, \d+\], got 0"),
        ({"nodes": 3, "cluster": ["127.0.0.1:1", "127.0.0.1:2"]},
         "nodes is for the embedded cluster only, got nodes=3 with a cluster"),
        ({"nodes": 1}, r"nodes must be an integer >= 2 \(one ps, one worker\), got 1"),
        ({"patience": 0}, r"patience must be an integer >= 1 \(iterations\) or None, got 0"),
        ({"patience": 2.5}, r"patience must be an integer >= 1 \(iterations\) or None, got 2.5"),
        ({"cluster": "127.0.0.1:1"}, "cluster must be None, a list of 'host:port' addresses, 'TF_CONFIG' or a Cluster"),
        ({"cluster": ["nohost", "127.0.0.1:1"]}, "cluster addresses must look like 'host:port', got 'nohost'"),
        ({"cluster": ["127.0.0.1:1"]}, "cluster must be a list of at least 2 'host:port' addresses"),
        ({"model_dir": 3}, "model_dir must be a directory path or None, got int"),
        ({"checkpoint_every_s": 0}, "checkpoint_every_s must be a number > 0 or None, got 0"),
        ({"checkpoint_every_s": float("inf")}, "checkpoint_every_s must be a number > 0 or None, got inf"),
        ({"keep_checkpoints": 0}, "keep_checkpoints must be an integer >= 1 or None, got 0"),
        ({"resume": "yes"}, "resume must be True or False, got 'yes'"),
    ],
)
def test_bad_options(kwargs, message, db_path):
    with pytest.raises(ConfigurationError, match=message):
        run_quick(TinyLogR(), db_path, **kwargs)


def test_bad_db_paths(tmp_path):
    with pytest.raises(RepositoryError, match="db must be a SQLite database"):
        notes = tmp_path / "notes.txt"
        notes.write_text("not sqlite\n" * 20)
        run_quick(TinyLogR(), str(notes))
    with pytest.raises(RepositoryError, match="db must be a writable SQLite file path"):
        run_quick(TinyLogR(), "/proc/tfonline-job.db")
    other = tmp_path / "app.db"
    sqlite3.connect(other).execute("create table orders (id)").connection.commit()
    with pytest.raises(RepositoryError, match=r"^db must be a tfonline repository or a new file, got '.*app.db': "
                                              r"a SQLite file with other tables \(orders\); tfonline leaves it as it is$"):
        run_quick(TinyLogR(), str(other))
    assert sqlite3.connect(other).execute("select name from sqlite_master").fetchall() == [("orders",)]


def test_local_cluster_needs_two_nodes():
    from tfonline.cluster import LocalCluster

    with pytest.raises(ConfigurationError, match=r"nodes must be an integer >= 2 \(one ps and one worker\), got 1"):
        LocalCluster(1)
