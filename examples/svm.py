"""Linear SVM (hinge loss) on Criteo-like hashed sparse data.

    python examples/svm.py [--db runs.db] [--ps 1 --worker 2] [--mode async|sync] [--libsvm FILE]
"""

from __future__ import annotations

import tensorflow as tf
from _common import SparseExample, add_libsvm_argument, run_example


class SVM(SparseExample):
    target_loss = 0.72
    max_seconds = 300
    smoothing_window = 50
    labels = "pm1"
    data_seed = 7

    def model_fn(self, features, labels):
        indices, values = features
        w = tf.compat.v1.get_variable("w", [self.num_features, 1], initializer=tf.compat.v1.zeros_initializer())
        b = tf.compat.v1.get_variable("b", [], initializer=tf.compat.v1.zeros_initializer())
        rows = tf.nn.embedding_lookup(w, indices)[..., 0]
        margin = labels * (tf.reduce_sum(rows * values, axis=1) + b)
        hinge = tf.reduce_mean(tf.maximum(0.0, 1.0 - margin))
        return hinge + 1e-4 * tf.reduce_mean(tf.reduce_sum(tf.square(rows), axis=1))

    def optimizer_fn(self):
        return tf.compat.v1.train.AdagradOptimizer(0.1)


def main(argv=None):
    return run_example(lambda args: SVM(args.libsvm), __doc__.splitlines()[0], add_libsvm_argument, argv)


if __name__ == "__main__":
    main()
