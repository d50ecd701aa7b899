"""Tiny real jobs for the tests: small enough to converge in seconds."""

from __future__ import annotations

import tensorflow as tf

import tfonline
from tfonline.data import hashed_sparse_dataset, teacher_dataset


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


class TunedLogR(SlowerLogR):
    """Converges in about two thousand iterations (7-12 s here): long enough for the tuner to reach its online
    phase, and for the report to find an ETA before 25, 50 and 75% of the training time.

    A live switch is made once it is prepared, while the workers train on, so each random setting
    comes a few hundred iterations after its decision on this fast a job.
    """

    def __init__(self, lr=0.01):
        TinyLogR.__init__(self, lr=lr)


class WideMLP(tfonline.MLJobFramework):
    """A teacher's labels learnt through one wide layer, which two ps nodes cut in two blocks (256 KiB); its
    weights take ``get_variable``'s default initializer, the output's Glorot's explicitly."""

    target_loss = 0.1
    smoothing_window = 5

    def input_fn(self, shard, num_shards):
        return teacher_dataset(shard, num_shards, batch_size=32, dim=32, classes=4)

    def model_fn(self, x, labels):
        hidden = tf.nn.relu(tf.matmul(x, tf.compat.v1.get_variable("wide", [32, 2048])))
        out = tf.compat.v1.get_variable("out", [2048, 4], initializer=tf.compat.v1.glorot_uniform_initializer())
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels,
                                                                             logits=tf.matmul(hidden, out)))

    def optimizer_fn(self):
        return tf.compat.v1.train.GradientDescentOptimizer(0.1)


class CountdownJob(tfonline.MLJobFramework):
    """Its loss is the batch it read: batches count down from ``start`` by 1, so the losses show the data order.

    One worker reads every batch; a job that reads on where it was has the loss ``start - step + 1`` at every
    step, across any switch. The model trains nothing that matters (its gradient is zero).
    """

    target_loss = 5.0
    max_seconds = 120
    smoothing_window = 1

    def __init__(self, start=3000):
        self.start = start

    def input_fn(self, shard, num_shards):
        dataset = tf.data.Dataset.range(self.start, 0, -1).shard(num_shards, shard)
        return dataset.map(lambda i: (tf.cast(tf.reshape(i, [1]), tf.float32), tf.zeros([1])))

    def model_fn(self, features, labels):
        w = tf.Variable(0.0, name="w")
        return tf.reduce_mean(features) + 0.0 * w

    def optimizer_fn(self):
        return tf.compat.v1.train.GradientDescentOptimizer(0.1)


class SkippingCountdownJob(CountdownJob):
    """A countdown whose ``input_fn`` skips batches itself (``skip``, see tfonline.MLJobFramework); ``given``
    counts the input iterators it was asked for with a skip."""

    given = 0

    def input_fn(self, shard, num_shards, skip=None):
        dataset = tf.data.Dataset.range(self.start, 0, -1).shard(num_shards, shard)
        if skip is not None:
            self.given += 1
            dataset = dataset.skip(skip)
        return dataset.map(lambda i: (tf.cast(tf.reshape(i, [1]), tf.float32), tf.zeros([1])))


class CounterJob(tfonline.MLJobFramework):
    """Every push adds exactly 1 to every parameter: the loss is 1000 − mean(parameters), SGD at rate ``size``.

    The parameter (``size`` float64s, large enough to be cut into partitions) read at a step therefore holds
    the number of pushes applied before that read, and the loss shows it: ``1000 - loss``.
    """

    target_loss = 1e-9  # never reached: runs stop at max_steps
    max_seconds = 120
    smoothing_window = 1
    size = 40_000  # 320 KB of float64: partitioned over the ps nodes

    def input_fn(self, shard, num_shards):
        return tf.data.Dataset.from_tensors((tf.zeros([1], tf.float64), tf.zeros([1], tf.float64))).repeat()

    def model_fn(self, features, labels):
        counter = tf.compat.v1.get_variable("counter", [self.size], tf.float64,
                                            initializer=tf.compat.v1.zeros_initializer())
        return 1000.0 - tf.reduce_mean(counter) + 0.0 * tf.reduce_sum(features)

    def optimizer_fn(self):
        return tf.compat.v1.train.GradientDescentOptimizer(float(self.size))


class QuadraticJob(tfonline.MLJobFramework):
    """Adagrad pulls a partitioned vector towards a fixed one; the gradient does not depend on the data.

    So a synchronous step means the same update whatever the number of workers (the mean of equal
    gradients): a run that changes its worker count trains exactly as one that does not, which isolates
    what a reconfiguration does to the parameters.
    """

    target_loss = 1e-12  # never reached: runs stop at max_steps
    max_seconds = 120
    smoothing_window = 1
    size = 70_000  # 280 KB of float32: cut into partitions

    def input_fn(self, shard, num_shards):
        return tf.data.Dataset.from_tensors((tf.zeros([1]), tf.zeros([1]))).repeat()

    def model_fn(self, features, labels):
        v = tf.compat.v1.get_variable("v", [self.size], initializer=tf.compat.v1.zeros_initializer())
        target = tf.linspace(-1.0, 1.0, self.size)
        return tf.reduce_sum(tf.square(v - target)) + 0.0 * tf.reduce_sum(features)

    def optimizer_fn(self):
        return tf.compat.v1.train.AdagradOptimizer(0.05)
