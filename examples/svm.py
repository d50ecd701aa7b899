"""Linear SVM (hinge loss) on Criteo-like hashed sparse data.

    python examples/svm.py [--db runs.db] [--ps 1 --worker 2] [--libsvm FILE]
"""

from __future__ import annotations

import argparse

import tensorflow as tf

import tfonline
from tfonline.data import hashed_sparse_dataset, libsvm_dataset

HASH_BITS = 20


class SVM(tfonline.MLJobFramework):
    target_loss = 0.72
    max_seconds = 300
    smoothing_window = 50

    def __init__(self, libsvm: str | None = None, num_features: int = 1 << HASH_BITS, max_nnz: int = 26):
        self.libsvm, self.num_features, self.max_nnz = libsvm, num_features, max_nnz

    def input_fn(self, shard, num_shards):
        if self.libsvm:
            return libsvm_dataset(self.libsvm, shard, num_shards, num_features=self.num_features,
                                  max_nnz=self.max_nnz, batch_size=64, labels="pm1")
        ds = hashed_sparse_dataset(shard, num_shards, batch_size=64, hash_bits=HASH_BITS,
                                   categories_per_field=1000, signal=3.0, seed=7)
        return ds.map(lambda features, y: (features, 2.0 * y - 1.0))  # labels in {-1, +1}

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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default="runs.db")
    parser.add_argument("--ps", type=int, default=1)
    parser.add_argument("--worker", type=int, default=2)
    parser.add_argument("--mode", default="async", choices=["async", "sync"])
    parser.add_argument("--libsvm")
    parser.add_argument("--max-steps", type=int)
    args = parser.parse_args(argv)
    result = SVM(args.libsvm).run(setting={"ps": args.ps, "worker": args.worker}, db=args.db, mode=args.mode,
                                  max_steps=args.max_steps)
    print(result)


if __name__ == "__main__":
    main()
