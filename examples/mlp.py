"""A small dense network on a teacher network's labels.

    python examples/mlp.py [--db runs.db] [--ps 1 --worker 2] [--mode async|sync] [--tune]

The data is generated (``tfonline.data.teacher_dataset``): 32-dimensional
Gaussian inputs labelled by a fixed random network. The model is small and
dense, so one iteration costs little besides its communication: the
number of workers and parameter servers sets its pace.
"""

from __future__ import annotations

import tensorflow as tf

import tfonline
from _common import run_example
from tfonline.data import teacher_dataset


class MLP(tfonline.MLJobFramework):
    target_loss = 0.55
    max_seconds = 300
    smoothing_window = 50
    learning_rate = 0.07
    momentum = 0.9
    dim, classes = 32, 10

    def input_fn(self, shard, num_shards, skip=None):  # skip: the batches skipped are not made
        return teacher_dataset(shard, num_shards, batch_size=64, dim=self.dim, classes=self.classes, seed=3,
                               skip=skip)

    def model_fn(self, x, labels):
        for i, width in enumerate((256, 256)):
            w = tf.compat.v1.get_variable(f"fc{i}", [x.shape[1], width],
                                          initializer=tf.compat.v1.glorot_uniform_initializer())
            b = tf.compat.v1.get_variable(f"fc{i}_b", [width], initializer=tf.compat.v1.zeros_initializer())
            x = tf.nn.relu(tf.matmul(x, w) + b)
        w = tf.compat.v1.get_variable("out", [x.shape[1], self.classes],
                                      initializer=tf.compat.v1.glorot_uniform_initializer())
        b = tf.compat.v1.get_variable("out_b", [self.classes], initializer=tf.compat.v1.zeros_initializer())
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=tf.matmul(x, w) + b))

    def optimizer_fn(self):
        return tf.compat.v1.train.MomentumOptimizer(self.learning_rate, momentum=self.momentum)


def main(argv=None):
    return run_example(lambda args: MLP(), __doc__.splitlines()[0], argv=argv)


if __name__ == "__main__":
    main()
