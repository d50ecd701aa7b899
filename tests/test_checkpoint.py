"""Checkpoints in TensorFlow's format and the model back from one, without a cluster."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf

import tfonline
from tfonline.checkpoint import CheckpointWriter, default_model_dir, user_variables
from tfonline.exceptions import ConfigurationError, JobDefinitionError

pytestmark = pytest.mark.fast  # no TensorFlow cluster


class Linear(tfonline.MLJobFramework):
    """y = x·w + b on fixed data; its metric is the mean absolute error."""

    target_loss = 0.01
    rows = 40

    def data(self):
        x = np.linspace(-1, 1, self.rows * 3, dtype=np.float32).reshape(self.rows, 3)
        return x, x @ np.array([[1.0], [-2.0], [0.5]], np.float32) + 0.25

    def input_fn(self, shard, num_shards):
        return tf.data.Dataset.from_tensor_slices(self.data()).batch(8).repeat()

    def eval_input_fn(self):
        return tf.data.Dataset.from_tensor_slices(self.data()).batch(16)

    def _predict(self, x):
        w = tf.compat.v1.get_variable("w", [3, 1], initializer=tf.compat.v1.zeros_initializer())
        b = tf.compat.v1.get_variable("b", [1], initializer=tf.compat.v1.zeros_initializer())
        return tf.matmul(x, w) + b

    def model_fn(self, x, y):
        return tf.reduce_mean(tf.square(self._predict(x) - y))

    def metrics_fn(self, x, y):
        return {"mae": tf.reduce_mean(tf.abs(self._predict(x) - y))}

    def optimizer_fn(self):
        return tf.compat.v1.train.AdagradOptimizer(0.1)


W = np.array([[1.0], [-2.0], [0.5]], np.float32)


def _cluster_values(w=W, step=12):
    """What the driver reads from a cluster where ``w`` is cut into two blocks, with Adagrad slots."""
    return {
        "w/part_0_of_2": w[:2], "w/part_1_of_2": w[2:],
        "w/part_0_of_2/Adagrad": np.full((2, 1), 0.1, np.float32), "w/part_1_of_2/Adagrad": np.full((1, 1), 0.2, np.float32),
        "b": np.array([0.25], np.float32), "b/Adagrad": np.array([0.3], np.float32),
        "tfonline_global_step": np.int64(step),
    }


def test_the_user_variables_are_joined_renamed_and_rid_of_tfonlines_own():
    joined = user_variables(_cluster_values())
    assert set(joined) == {"w", "w/Adagrad", "b", "b/Adagrad", "global_step"}
    assert np.array_equal(joined["w"], W)
    assert np.allclose(joined["w/Adagrad"], [[0.1], [0.1], [0.2]])
    assert joined["global_step"] == 12 and joined["global_step"].dtype == np.int64


def test_a_checkpoint_is_read_by_tensorflow_and_the_latest_ones_are_kept(tmp_path):
    writer = CheckpointWriter(tmp_path, keep=2)
    paths = [writer.write(_cluster_values(W * step, step), step) for step in (10, 20, 30)]
    writer.close()
    assert paths[-1] == str(tmp_path / "model.ckpt-30") and tf.train.latest_checkpoint(str(tmp_path)) == paths[-1]
    assert not os.path.exists(paths[0] + ".index") and os.path.exists(paths[1] + ".index")
    reader = tf.train.load_checkpoint(paths[-1])
    assert reader.get_variable_to_shape_map() == {"w": [3, 1], "w/Adagrad": [3, 1], "b": [1], "b/Adagrad": [1],
                                                  "global_step": []}
    assert np.array_equal(reader.get_tensor("w"), W * 30) and reader.get_tensor("global_step") == 30


def test_the_users_own_graph_restores_the_model_and_its_optimizer_with_a_saver(tmp_path):
    path = CheckpointWriter(tmp_path).write(_cluster_values(), 12)
    job = Linear()
    with tf.Graph().as_default():
        x, y = tf.compat.v1.data.make_one_shot_iterator(job.input_fn(0, 1)).get_next()
        loss = job.model_fn(x, y)
        step = tf.compat.v1.train.get_or_create_global_step()
        job.optimizer_fn().minimize(loss, global_step=step)
        with tf.compat.v1.Session() as session:
            tf.compat.v1.train.Saver().restore(session, path)
            assert session.run(step) == 12
            assert session.run(loss) == pytest.approx(0.0, abs=1e-10)  # w and b are the data's own
            (slot,) = [v for v in tf.compat.v1.global_variables() if v.op.name == "w/Adagrad"]
            assert np.allclose(session.run(slot), [[0.1], [0.1], [0.2]])


def test_restore_evaluates_on_the_eval_data_and_on_any_dataset(tmp_path):
    CheckpointWriter(tmp_path).write(_cluster_values(W + 0.5, 7), 7)
    job = Linear()
    with job.restore(str(tmp_path)) as model:  # a directory: its latest checkpoint
        assert model.step == 7 and set(model.variables) == {"w", "b"}
        x, y = job.data()
        expected = np.mean(np.abs(x @ (W + 0.5) + 0.25 - y))
        assert model.evaluate()["mae"] == pytest.approx(expected, rel=1e-6)
        # a last batch of 3 weighs 3/23 of the mean, not a third
        part = lambda: tf.data.Dataset.from_tensor_slices((x[:23], y[:23])).batch(10)  # noqa: E731
        assert model.evaluate(part)["mae"] == pytest.approx(np.mean(np.abs(x[:23] @ (W + 0.5) + 0.25 - y[:23])),
                                                            rel=1e-6)


def test_the_default_model_dir_is_beside_the_repository(tmp_path):
    assert default_model_dir(tmp_path / "runs.db", "Job-1") == str(tmp_path / "runs.models" / "Job-1")


class NoEval(Linear):
    eval_input_fn = tfonline.MLJobFramework.eval_input_fn


class Endless(Linear):
    def eval_input_fn(self):
        return super().eval_input_fn().repeat()


class Empty(Linear):
    def eval_input_fn(self):
        return super().eval_input_fn().take(0)


class NotADict(Linear):
    def metrics_fn(self, x, y):
        return tf.reduce_mean(self._predict(x))


class Matrix(Linear):
    def metrics_fn(self, x, y):
        return {"prediction": self._predict(x)}


class NewVariable(Linear):
    def metrics_fn(self, x, y):
        scale = tf.compat.v1.get_variable("scale", [], initializer=tf.compat.v1.ones_initializer())
        return {"mae": scale * tf.reduce_mean(tf.abs(self._predict(x) - y))}


class NotADataset(Linear):
    def eval_input_fn(self):
        return self.data()


@pytest.mark.parametrize("job, error, message", [
    (NotADict(), JobDefinitionError, "metrics_fn must return a non-empty dict of name -> scalar tensor, got "
                                     "SymbolicTensor"),
    (Matrix(), JobDefinitionError, "metrics_fn must return scalar numeric tensors, got 'prediction': float32 "
                                   r"\(None, 1\)"),
    (NotADataset(), JobDefinitionError, r"eval_input_fn must return a tf.data.Dataset of \(features, labels\), "
                                        "got tuple"),
    (NewVariable(), ConfigurationError, "checkpoint must hold the model's variables, got .* without scale"),
])
def test_bad_evaluations_are_one_line_errors_at_restore(tmp_path, job, error, message):
    CheckpointWriter(tmp_path).write(_cluster_values(), 12)
    with pytest.raises(error, match=message):
        job.restore(str(tmp_path))


@pytest.mark.parametrize("job, message", [
    (Endless(), "eval_input_fn's dataset must end, got an infinite one"),
    (NewVariable(), "metrics_fn must build its model from the variables model_fn creates, got a new one, 'scale'"),
    (NotADict(), "metrics_fn must return a non-empty dict"),
])
def test_bad_evaluations_stop_a_job_before_any_node_starts(db_path, job, message):
    with pytest.raises(JobDefinitionError, match=message):
        job.run(db=db_path, cluster=["localhost:1", "localhost:2"], quiet=True)


def test_evaluate_errors(tmp_path):
    CheckpointWriter(tmp_path).write(_cluster_values(), 12)
    with NoEval().restore(str(tmp_path)) as model:
        with pytest.raises(ConfigurationError, match="evaluate needs data: NoEval has no eval_input_fn, and no "
                                                     "input_fn was given"):
            model.evaluate()
        with pytest.raises(ConfigurationError, match="input_fn must be a function returning a tf.data.Dataset, got "
                                                     "list"):
            model.evaluate([1, 2])
        with pytest.raises(JobDefinitionError, match=r"input_fn must return a tf.data.Dataset of \(features, "
                                                     r"labels\), got tuple"):
            model.evaluate(lambda: (1, 2))
        with pytest.raises(JobDefinitionError, match="input_fn must yield what the model was built on, got another "
                                                     "structure"):
            model.evaluate(lambda: tf.data.Dataset.from_tensor_slices((np.zeros((4, 5), np.float32),
                                                                       np.zeros((4, 1)))))
    with Empty().restore(str(tmp_path)) as model:
        with pytest.raises(JobDefinitionError, match="eval_input_fn's dataset must hold at least one example, got none"):
            model.evaluate()


def test_restore_errors(tmp_path):
    job = Linear()
    with pytest.raises(ConfigurationError, match="checkpoint must be a directory with checkpoints, got .*: it has none"):
        job.restore(str(tmp_path))
    with pytest.raises(ConfigurationError, match=r"checkpoint must be an existing checkpoint, got .*nothing'?: no "
                                                 r".*nothing.index"):
        job.restore(str(tmp_path / "nothing"))
    with pytest.raises(ConfigurationError, match="checkpoint must be a checkpoint path, a directory or a RunResult, "
                                                 "got int"):
        job.restore(3)
    none = tfonline.RunResult("j", "failed", "error", 0, 1.0, None, None, "runs.db")
    with pytest.raises(ConfigurationError, match="checkpoint must name a checkpoint, got a result with none"):
        job.restore(none)
    with pytest.raises(ConfigurationError, match="keep must be an integer >= 1 or None, got 0"):
        CheckpointWriter(tmp_path, keep=0)
