"""Tiny real jobs for the tests: small enough to converge in seconds."""

from __future__ import annotations

import tensorflow as tf

import tfonline
from tfonline.data import hashed_sparse_dataset


class TinyLogR(tfonline.MLJobFramework):
    """Logistic regression on 2**12 hashed features; converges in a few hundred steps."""

    target_loss = 0.6
    max_seconds = 120
    smoothing_window = 10

    def __init__(self, num_batches=None, hash_bits=12, lr=0.5):
        self.num_batches, self.hash_bits, self.lr = num_batches, hash_bits, lr

    def input_fn(self, shard, num_shards):
        return hashed_sparse_dataset(shard, num_shards, batch_size=32, fields=8, categories_per_field=50,
                                     hash_bits=self.hash_bits, signal=3.0, num_batches=self.num_batches)

    def model_fn(self, features, labels):
        indices, values = features
        w = tf.compat.v1.get_variable("w", [1 << self.hash_bits, 1], initializer=tf.compat.v1.zeros_initializer())
        b = tf.Variable(0.0, name="b")
        logits = tf.reduce_sum(tf.nn.embedding_lookup(w, indices)[..., 0] * values, axis=1) + b
        return tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))

    def optimizer_fn(self):
        return tf.compat.v1.train.AdagradOptimizer(self.lr)


class SlowerLogR(TinyLogR):
    """Converges in a few hundred iterations: long enough to estimate on, and to tune."""

    target_loss = 0.60
    smoothing_window = 20

    def __init__(self):
        super().__init__(lr=0.05)
