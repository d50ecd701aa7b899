"""Real jobs on a real local cluster of TensorFlow servers."""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
import time

import pytest
import tensorflow as tf
from conftest import after_iterations, node_processes
from jobs import TinyLogR

from tfonline._runner import Runner
from tfonline.exceptions import DatasetExhaustedError, NodeFailedError
from tfonline.setting import resolve_setting


def _rows(db_path, sql, *params):
    return sqlite3.connect(db_path).execute(sql, params).fetchall()


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_job_reaches_its_target(cluster, db_path, mode):
    result = TinyLogR().run(db=db_path, cluster=cluster, mode=mode, quiet=True)
    assert result.status == "converged", result.stop_reason
    assert result.final_loss <= TinyLogR.target_loss
    assert result.iterations >= TinyLogR.smoothing_window
    steps = [r[0] for r in _rows(db_path, "select step from iterations order by step")]
    assert steps == list(range(1, result.iterations + 1))
    (status, reason, iterations, first_at), = _rows(
        db_path, "select status, stop_reason, iterations, first_iteration_at from jobs")
    assert (status, iterations) == ("converged", result.iterations)
    assert "target_loss 0.6 reached" in reason and first_at is not None
    workers = {r[0] for r in _rows(db_path, "select distinct worker from iterations")}
    assert workers == ({None} if mode == "sync" else {0, 1})
    (start_step, end_step, setting_id), = _rows(db_path, "select start_step, end_step, setting_id from segments")
    assert (start_step, end_step) == (1, result.iterations)
    assert _rows(db_path, "select count(*) from settings where id = ?", setting_id) == [(1,)]
    (start_loss, end_loss, final_loss, first_loss), = _rows(
        db_path, "select s.start_loss, s.end_loss, j.final_loss, (select loss from iterations where step = 1) "
        "from segments s join jobs j on j.id = s.job_id")
    assert start_loss == first_loss and end_loss == pytest.approx(final_loss)


def test_every_knob_reaches_tensorflow(cluster, db_path):
    knobs = {
        "ps": 1, "worker": 1, "intra_op_parallelism_threads": 1, "inter_op_parallelism_threads": 1,
        "do_common_subexpression_elimination": False, "max_folded_constant_in_bytes": 2048,
        "do_function_inlining": False, "global_jit_level": "ON_1", "infer_shapes": True,
        "place_pruned_graph": True, "enable_bfloat16_sendrecv": True,
    }
    runner = Runner(TinyLogR(), knobs, db=db_path, mode="async", cluster=cluster, nodes=None, seed=0,
                    max_steps=3, max_seconds=None, quiet=True)
    result = runner.run()
    assert result.status == "stopped" and result.iterations == 3
    # ps and worker: the layout the graph was built for, and where variables live.
    assert runner.layout.ps_nodes == (0,) and runner.layout.worker_nodes == (1,)
    assert {v.device for v in runner.graphs[0].model_variables} == {"/job:node/task:0/device:CPU:0"}
    # Thread pools: what each used node's tf.distribute.Server holds in its server_def.
    for node in (0, 1):
        served = cluster.served[node]
        assert served["intra_op_parallelism_threads"] == 1 and served["inter_op_parallelism_threads"] == 1
    # XLA on CPU: the node executing the graph runs with the flag auto-clustering needs.
    # GPU memory (with a GPU build): each node takes what it uses, not the whole device.
    with open(f"/proc/{cluster.served[1]['pid']}/environ", "rb") as f:
        environ = f.read().split(b"\0")
    assert any(b"--tf_xla_cpu_global_jit" in v for v in environ if v.startswith(b"TF_XLA_FLAGS="))
    assert b"TF_FORCE_GPU_ALLOW_GROWTH=true" in environ
    # Session knobs: the ConfigProto TensorFlow's training session was opened with.
    training = [config for node, config in runner.session_configs if config.graph_options.optimizer_options.global_jit_level == 1]
    assert len(training) == 1
    graph = training[0].graph_options
    opt = graph.optimizer_options
    assert (opt.do_common_subexpression_elimination, opt.max_folded_constant_in_bytes, opt.do_function_inlining) == (
        False, 2048, False)
    assert (graph.infer_shapes, graph.place_pruned_graph, graph.enable_bfloat16_sendrecv) == (True, True, True)
    stored = _rows(db_path, "select knobs from settings")[0][0]
    assert resolve_setting(knobs, 3) == __import__("json").loads(stored)


def test_max_steps_stops_the_job(cluster, db_path):
    result = TinyLogR().run(db=db_path, cluster=cluster, max_steps=7, quiet=True)
    assert (result.status, result.iterations) == ("stopped", 7)
    assert _rows(db_path, "select stop_reason from jobs") == [("max_steps (7) reached",)]


def test_dataset_that_ends_before_convergence(cluster, db_path):
    job = TinyLogR(num_batches=12)
    job.target_loss = 0.01
    with pytest.raises(DatasetExhaustedError, match=r"the dataset ended at step \d+ before convergence: smoothed "
                                                   r"loss [\d.]+ > target_loss 0.01; repeat it in input_fn"):
        job.run(db=db_path, cluster=cluster, quiet=True)
    (status, reason), = _rows(db_path, "select status, stop_reason from jobs")
    assert status == "data_exhausted" and "dataset ended" in reason
    assert _rows(db_path, "select count(*) from iterations")[0][0] <= 12


def test_a_node_whose_loss_leaves_no_worker_fails_the_job_naming_it(db_path):
    """ps1 w1 on two nodes of the test's own: node 1 is the only worker. Its loss leaves no worker to train
    on (a lost worker with another left, or a lost ps node, is survived: tests/test_lost_nodes.py). A node
    lost mid-job is not restarted in place for later jobs (tests/test_lost_nodes.py says why)."""
    from tfonline.cluster import LocalCluster

    job = TinyLogR()
    job.target_loss = 1e-6
    with LocalCluster(2) as cluster:
        pids = list(cluster.node_pids)
        killer, _ = after_iterations(db_path, 20, lambda: os.kill(pids[1], signal.SIGKILL))
        with pytest.raises(NodeFailedError, match=r"^node 1 \(127.0.0.1:\d+\) died during the job with exit code -9; "
                                                  r"it was the job's only worker$"):
            job.run(db=db_path, cluster=cluster, setting={"ps": 1, "worker": 1}, quiet=True)
        killer.join()
    assert not set(pids) & node_processes()
    (status, reason), = _rows(db_path, "select status, stop_reason from jobs")
    assert status == "failed" and reason.endswith("it was the job's only worker")
    assert _rows(db_path, "pragma integrity_check") == [("ok",)]


class LibsvmLogR(TinyLogR):
    def __init__(self, path):
        super().__init__()
        self.path = path

    def input_fn(self, shard, num_shards):
        from tfonline.data import libsvm_dataset

        return libsvm_dataset(self.path, shard, num_shards, num_features=1 << self.hash_bits, max_nnz=8,
                              batch_size=32)


def test_job_trains_from_a_libsvm_file(cluster, db_path, tmp_path):
    import numpy as np

    from tfonline.data import hashed_sparse_dataset, write_libsvm

    batches = list(hashed_sparse_dataset(0, 1, batch_size=100, fields=8, categories_per_field=50, hash_bits=12,
                                         signal=3.0, num_batches=20))
    indices = np.concatenate([b[0][0].numpy() for b in batches])
    labels = np.concatenate([b[1].numpy() for b in batches])
    path = str(tmp_path / "train.libsvm")
    write_libsvm(path, indices, np.ones_like(indices, dtype=np.float32), labels)
    result = LibsvmLogR(path).run(db=db_path, cluster=cluster, quiet=True)
    assert result.status == "converged", result.stop_reason


def test_max_seconds_stops_the_job(cluster, db_path):
    job = TinyLogR()
    job.target_loss = 1e-6
    result = job.run(db=db_path, cluster=cluster, max_seconds=4, quiet=True)
    assert result.status == "stopped" and result.iterations > 0
    assert _rows(db_path, "select stop_reason from jobs") == [("max_seconds (4 s) reached",)]


class Diverging(TinyLogR):
    def model_fn(self, features, labels):
        w = tf.compat.v1.get_variable("w", [4], initializer=tf.compat.v1.zeros_initializer())
        return tf.reduce_mean(tf.math.log(w * 0.0 + 0.0 * labels[0])) + tf.reduce_sum(w)


def test_a_loss_that_is_not_finite_fails_the_job(cluster, db_path):
    from tfonline.exceptions import TfOnlineError

    # The first loss recorded is -inf (log 0, from the zero weights) or nan: the workers are asynchronous, and one
    # that reads the weights after another's first update (whose gradient, 0/0, is nan) computes a nan loss.
    with pytest.raises(TfOnlineError, match=r"^the loss became (-inf|nan) at step 1: training diverged$"):
        Diverging().run(db=db_path, cluster=cluster, quiet=True)
    assert _rows(db_path, "select status from jobs") == [("failed",)]


class Shapeshifter(TinyLogR):
    """Creates one more variable on every call of model_fn."""

    calls = 0

    def model_fn(self, features, labels):
        type(self).calls += 1
        extra = [tf.compat.v1.get_variable(f"extra{i}", [2]) for i in range(self.calls)]
        return super().model_fn(features, labels) + tf.add_n([tf.reduce_sum(e) for e in extra])


def test_model_fn_must_create_the_same_variables_every_time(cluster, db_path):
    from tfonline.exceptions import JobDefinitionError

    with pytest.raises(JobDefinitionError, match=r"model_fn must create the same variables on every call"):
        Shapeshifter().run(db=db_path, cluster=cluster, quiet=True)


def test_a_container_reset_drops_the_jobs_variables_from_that_node_alone(cluster):
    """What a job's end does on nodes that outlive it (tfonline._calls.reset_node): node 0's variable of the
    container goes, node 1's stays (each node is reset by itself, so that none waits on another)."""
    from tfonline._calls import reset_node

    container = "tfonline.test-reset"
    graph = tf.Graph()
    with graph.as_default():
        there, init = [], []
        for node in (0, 1):
            with tf.device(f"/job:node/task:{node}"):
                handle = tf.raw_ops.VarHandleOp(dtype=tf.float32, shape=[], container=container, shared_name="v")
                init.append(tf.raw_ops.AssignVariableOp(resource=handle, value=1.0))
                there.append(tf.raw_ops.VarIsInitializedOp(resource=handle))
    config = tf.compat.v1.ConfigProto(device_filters=["/job:node/task:0", "/job:node/task:1"])

    def run(fetches):  # a session each time: a reset also closes the sessions its node is the master of
        with tf.compat.v1.Session(cluster.target(0), graph=graph, config=config) as session:
            return session.run(fetches)

    run(init)
    assert run(there) == [True, True]
    reset_node(cluster.addresses[0], [container], 0, timeout_s=5.0)
    assert run(there) == [False, True]
    reset_node(cluster.addresses[1], [container], 1, timeout_s=5.0)
    assert run(there) == [False, False]
