from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tfonline.data import (digits_dataset, evaluation_dataset, hashed_sparse_dataset, libsvm_dataset, load_digits, teacher_dataset,
                           write_libsvm)
from tfonline.exceptions import ConfigurationError


pytestmark = pytest.mark.fast  # no TensorFlow cluster: `pytest -m fast` runs these in under a minute


def _batches(ds, n):
    return [tf.nest.map_structure(lambda t: t.numpy(), b) for b in ds.take(n)]


def test_libsvm_loader_reads_back_a_generated_file(tmp_path):
    rng = np.random.default_rng(0)
    rows, nnz, features = 50, 6, 1000
    indices = np.stack([rng.choice(features, nnz, replace=False) for _ in range(rows)])
    values = rng.uniform(0.5, 2.0, (rows, nnz)).round(3)
    values[::7, -2:] = 0  # shorter rows: padded on reading
    labels = rng.choice([-1, 1], rows)
    path = str(tmp_path / "train.libsvm")
    write_libsvm(path, indices, values, labels)
    with open(path) as f:
        assert f.readline().split()[1].count(":") == 1
    ds = libsvm_dataset(path, 0, 1, num_features=features, max_nnz=nnz, batch_size=10, repeat=False, labels="pm1")
    got = _batches(ds, 100)
    assert len(got) == 5
    got_idx = np.concatenate([b[0][0] for b in got])
    got_val = np.concatenate([b[0][1] for b in got])
    got_lab = np.concatenate([b[1] for b in got])
    for r in range(rows):
        expected = {int(i): float(v) for i, v in zip(indices[r], values[r]) if v != 0}
        read = {int(i): float(v) for i, v in zip(got_idx[r], got_val[r]) if v != 0}
        assert read == pytest.approx(expected)
    assert np.array_equal(got_lab, labels.astype(np.float32))
    zero_one = libsvm_dataset(path, 0, 1, num_features=features, max_nnz=nnz, batch_size=50, repeat=False)
    assert set(np.unique(_batches(zero_one, 1)[0][1])) == {0.0, 1.0}


def test_libsvm_shards_cover_the_file_without_overlap(tmp_path):
    path = str(tmp_path / "t.libsvm")
    write_libsvm(path, np.arange(30).reshape(30, 1), np.ones((30, 1)), np.ones(30))
    seen = []
    for shard in range(3):
        ds = libsvm_dataset(path, shard, 3, num_features=100, max_nnz=1, batch_size=4, repeat=False)
        seen += [int(i) for b in _batches(ds, 100) for i in b[0][0][:, 0]]
    assert sorted(seen) == list(range(30))


def test_libsvm_bad_label_mode(tmp_path):
    with pytest.raises(ConfigurationError, match="labels must be '01' or 'pm1', got 'yes'"):
        libsvm_dataset(str(tmp_path / "x"), 0, 1, num_features=1, max_nnz=1, labels="yes")


def test_hashed_data_is_deterministic_sharded_and_learnable():
    a = _batches(hashed_sparse_dataset(0, 1, batch_size=16, hash_bits=12, num_batches=4), 4)
    b = _batches(hashed_sparse_dataset(0, 1, batch_size=16, hash_bits=12, num_batches=4), 4)
    for (fa, la), (fb, lb) in zip(a, b):
        assert np.array_equal(fa[0], fb[0]) and np.array_equal(la, lb)
    idx = np.concatenate([x[0][0] for x in a])
    assert idx.shape == (64, 26) and idx.min() >= 0 and idx.max() < 1 << 12
    shard1 = _batches(hashed_sparse_dataset(1, 2, batch_size=16, hash_bits=12, num_batches=4), 4)
    assert len(shard1) == 2 and np.array_equal(shard1[0][0][0], a[1][0][0])  # batch 1 goes to shard 1
    labels = np.concatenate([x[1] for x in _batches(hashed_sparse_dataset(0, 1, num_batches=20), 20)])
    assert 0.2 < labels.mean() < 0.8


def test_hash_bits_out_of_range():
    with pytest.raises(ConfigurationError, match="hash_bits must be in \\[1, 30\\], got 40"):
        hashed_sparse_dataset(0, 1, hash_bits=40)


@pytest.mark.parametrize("source, side, count", [("mnist", 28, 5000), ("sklearn", 8, 1797)])
def test_shipped_digits(source, side, count):
    images, labels = load_digits(source)
    assert images.shape == (count, side, side, 1) and images.dtype == np.uint8
    assert set(np.unique(labels)) == set(range(10))
    (x, y), = _batches(digits_dataset(images, labels, 0, 2, batch_size=8), 1)
    assert x.shape == (8, side, side, 1) and 0.0 <= x.min() and x.max() <= 1.0


@pytest.mark.parametrize("source", ["sklearn"])  # mnist: tests/test_data_mnist.py, outside pytest -m fast
def test_the_test_split_is_a_fifth_of_each_class_and_the_train_split_the_rest(source):
    images, labels = load_digits(source)
    train_x, train_y = load_digits(source, split="train")
    test_x, test_y = load_digits(source, split="test")
    assert len(train_y) + len(test_y) == len(labels)  # and each class gives a fifth of its digits, to one
    assert np.all(np.abs(np.bincount(test_y) - np.bincount(labels) / 5) <= 1)
    # together they are the whole set, each digit once
    assert sorted(x.tobytes() for x in np.concatenate([train_x, test_x])) == sorted(x.tobytes() for x in images)
    again_x, _ = load_digits(source, split="test")
    assert np.array_equal(again_x, test_x)


def test_an_evaluation_dataset_reads_every_image_once_in_order():
    images, labels = load_digits("sklearn", split="test")
    read = _batches(evaluation_dataset(images, labels, batch_size=100), 4)
    assert [len(y) for _, y in read] == [100, 100, 100, len(labels) - 300]
    assert np.array_equal(np.concatenate([y for _, y in read]), labels)
    assert np.allclose(np.concatenate([x for x, _ in read]), images / 255.0)


def test_an_unknown_split():
    with pytest.raises(ConfigurationError, match="split must be None, 'train' or 'test', got 'valid'"):
        load_digits("sklearn", split="valid")


def test_augmented_digits_move_and_get_noise_each_time_they_are_read():
    images, labels = load_digits("sklearn")
    one = np.repeat(images[:1], 64, axis=0)  # one digit, read many times
    plain = _batches(digits_dataset(one, labels[:64], 0, 1, batch_size=64), 1)[0][0]
    shifted = _batches(digits_dataset(one, labels[:64], 0, 1, batch_size=64, shift=2), 1)[0][0]
    noisy = _batches(digits_dataset(one, labels[:64], 0, 1, batch_size=64, noise=0.3), 1)[0][0]
    assert shifted.shape == plain.shape == noisy.shape == (64, 8, 8, 1)
    # Without augmentation every read is the same image; shifted reads differ, and each keeps the digit's ink
    # or loses only what left the frame.
    assert np.ptp(plain, axis=0).max() == 0.0
    assert len({x.tobytes() for x in shifted}) > 5 and shifted.sum(axis=(1, 2, 3)).max() <= plain[0].sum() + 1e-5
    assert np.std(noisy - plain) == pytest.approx(0.3, rel=0.1)


def test_augmentation_refuses_a_negative_shift():
    images, labels = load_digits("sklearn")
    with pytest.raises(ConfigurationError, match="shift and noise must be >= 0, got shift=-1, noise=0.0"):
        digits_dataset(images, labels, 0, 1, shift=-1)


def test_teacher_data_is_the_same_batch_whichever_worker_reads_it():
    alone = _batches(teacher_dataset(0, 1, batch_size=16, seed=3), 4)
    shard1 = _batches(teacher_dataset(1, 2, batch_size=16, seed=3), 2)
    for (x, y), (x1, y1) in zip((alone[1], alone[3]), shard1):  # batch b goes to worker b mod 2
        assert np.array_equal(x, x1) and np.array_equal(y, y1)
    xs, ys = np.concatenate([x for x, _ in alone]), np.concatenate([y for _, y in alone])
    assert xs.shape == (64, 32) and abs(xs.mean()) < 0.1 and ys.min() >= 0 and ys.max() <= 9
    assert len(set(ys.tolist())) >= 5  # the teacher uses many classes, not one
    other = _batches(teacher_dataset(0, 1, batch_size=16, seed=4), 1)[0][1]
    assert not np.array_equal(other, alone[0][1])  # another seed, another teacher and inputs


def test_teacher_data_refuses_one_class():
    with pytest.raises(ConfigurationError, match="dim, hidden >= 1 and classes >= 2 expected, got dim=32, "
                                                 "hidden=64, classes=1"):
        teacher_dataset(0, 1, classes=1)


def test_unknown_digits():
    with pytest.raises(ConfigurationError, match="source must be 'mnist' or 'sklearn', got 'emnist'"):
        load_digits("emnist")


def test_digits_and_libsvm_skip_batches_before_they_make_them(tmp_path):
    """An input_fn's ``skip`` (tfonline.MLJobFramework): the data skipped by k batches starts at batch k of the
    whole. The labels show the digits' order: skipping 3 batches gives batches 3 and 4, augmented or not."""
    images, labels = load_digits("sklearn")
    whole = [y for _, y in _batches(digits_dataset(images, labels, 0, 2, batch_size=16), 5)]
    skip = tf.constant(3, tf.int64)  # as tfonline gives it
    skipped = [y for _, y in _batches(digits_dataset(images, labels, 0, 2, batch_size=16, skip=skip), 2)]
    assert [list(y) for y in skipped] == [list(y) for y in whole[3:5]]
    augmented = _batches(digits_dataset(images, labels, 0, 2, batch_size=16, shift=2, noise=0.3, skip=3), 2)
    assert [list(y) for _, y in augmented] == [list(y) for y in whole[3:5]]  # the same digits, augmented
    path = str(tmp_path / "t.libsvm")
    write_libsvm(path, np.arange(30).reshape(30, 1), np.ones((30, 1)), np.ones(30))
    ds = libsvm_dataset(path, 1, 3, num_features=100, max_nnz=1, batch_size=2, repeat=False, skip=2)
    assert [int(i) for b in _batches(ds, 10) for i in b[0][0][:, 0]] == [13, 16, 19, 22, 25, 28]


def test_generated_data_skips_batches_without_making_them():
    """An input_fn's ``skip`` on generated data: worker 1 of 3 skipping 2 of its batches reads batches 7, 10, ...
    of the whole; and a skip of 10^15 batches, which no machine could make, returns at once with the batch it
    names (tf.data's skip of the made batches made every one: a LogR job's switches grew 0.6 s dearer per 30,000
    steps)."""
    for make in (lambda **k: hashed_sparse_dataset(batch_size=4, hash_bits=12, **k),
                 lambda **k: teacher_dataset(batch_size=4, seed=3, **k)):
        whole = _batches(make(shard=0, num_shards=1), 14)
        skipped = _batches(make(shard=1, num_shards=3, skip=tf.constant(2, tf.int64)), 3)
        for got, want in zip(skipped, [whole[7], whole[10], whole[13]]):
            assert all(np.array_equal(a, b) for a, b in zip(tf.nest.flatten(got), tf.nest.flatten(want)))
        far = _batches(make(shard=0, num_shards=1, skip=10**15), 1)[0]
        same = _batches(make(shard=0, num_shards=2, skip=10**15 // 2), 1)[0]  # batch 10^15 again
        assert all(np.array_equal(a, b) for a, b in zip(tf.nest.flatten(far), tf.nest.flatten(same)))
