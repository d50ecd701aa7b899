"""Sparse logistic regression on Criteo-like hashed click data.

    python examples/logr.py [--db runs.db] [--ps 1 --worker 2] [--mode async|sync] [--tune] [--libsvm FILE]

The default data is generated (``tfonline.data.hashed_sparse_dataset``,
2**20 hashed features); ``--libsvm FILE`` trains on a libsvm-format file
instead.
"""

from __future__ import annotations

import tensorflow as tf
from _common import SparseExample, add_libsvm_argument, run_example


class LogR(SparseExample):
    target_loss = 0.56
    max_seconds = 300
    smoothing_window = 50
    learning_rate = 0.5  # an attribute, so that a sweep can set it (tfonline.sweep)

    def model_fn(self, features, labels):
        indices, values = features
        w = tf.compat.v1.get_variable("w", [self.num_features, 1], initializer=tf.compat.v1.zeros_initializer())
        b = tf.compat.v1.get_variable("b", [], initializer=tf.compat.v1.zeros_initializer())
        rows = tf.nn.embedding_lookup(w, indices)[..., 0]
        loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=tf.reduce_sum(
            rows * values, axis=1) + b))
        return loss + 1e-6 * tf.nn.l2_loss(rows)

    def optimizer_fn(self):
        return tf.compat.v1.train.AdagradOptimizer(self.learning_rate)


def main(argv=None):
    return run_example(lambda args: LogR(args.libsvm), __doc__.splitlines()[0], add_libsvm_argument, argv)


if __name__ == "__main__":
    main()
