"""A workload's signature, read from its graph, and the distance between two."""

from __future__ import annotations

import dataclasses
import os
import sys

import pytest
from jobs import TinyLogR

from tfonline.placement import DEFAULT_PARTITION_MIN_BYTES
from tfonline.signature import Signature, distance, signature

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "examples"))
from cnn import CNN  # noqa: E402

# the marked tests build no graph; the CNN's signature builds its graph (seconds): not in `-m fast`
fast = pytest.mark.fast


def _sig(job, mode="async"):
    return signature(job, DEFAULT_PARTITION_MIN_BYTES, mode)


@pytest.fixture(scope="module")
def cnn_signature():
    """The CNN example's signature, read once (4 s: its digits and its graph)."""
    return _sig(CNN())


def test_the_cnns_signature_counts_its_variables_and_the_work_of_its_forward_pass(cnn_signature):
    sig = cnn_signature
    assert (sig.variables, sig.optimizer, sig.mode, sig.sparse_reads) == (8, "MomentumOptimizer", "async", False)
    weights = 5 * 5 * 32 + 32 + 5 * 5 * 32 * 64 + 64 + 3136 * 256 + 256 + 256 * 10 + 10
    assert sig.parameter_bytes == 4 * weights and sig.largest_bytes == 4 * 3136 * 256 and sig.partitioned
    # 28x28 -> conv 5x5x1x32 -> pool -> 14x14 conv 5x5x32x64 -> pool -> 7x7x64 = 3136 -> 256 -> 10
    madds = 28 * 28 * 32 * 25 + 14 * 14 * 64 * 25 * 32 + 3136 * 256 + 256 * 10
    assert sig.madds_per_example == madds
    assert sig.batch_size is None and sig.example_shapes == ((28, 28, 1), ())  # no drop_remainder: unknown
    assert sig.describe().startswith("8 variables, 3.27 MB (largest 3.06 MB, cut across the ps nodes), 11.5M "
                                  "multiply-adds per example")


def test_a_sweeps_jobs_are_alike_and_another_model_is_not(cnn_signature):
    base = _sig(TinyLogR())
    assert _sig(TinyLogR(lr=0.05)) == base and distance(_sig(TinyLogR(lr=0.05)), base) == 0.0
    big = _sig(TinyLogR(hash_bits=17))  # 32 times the weights, large enough to be cut
    assert big.sparse_reads and big.partitioned and not base.partitioned
    assert big.parameter_bytes == 32 * base.parameter_bytes - 31 * 4  # w grows, its bias does not
    assert 0 < distance(base, big) < distance(base, cnn_signature)
    assert distance(base, _sig(TinyLogR(), mode="sync")) == 1.0  # another mode, all else alike


@fast
def test_the_distance_is_symmetric_and_grows_with_each_difference():
    a = _sig(TinyLogR())
    variants = [dataclasses.replace(a, parameter_bytes=a.parameter_bytes * k) for k in (2, 4, 16)]
    gaps = [distance(a, v) for v in variants]
    assert gaps == sorted(gaps) and gaps[0] > 0
    assert all(distance(a, v) == distance(v, a) for v in variants)
    other = dataclasses.replace(a, optimizer="AdamOptimizer")
    assert distance(a, other) == 1.0 and distance(a, dataclasses.replace(other, mode="sync")) == 2.0
    assert Signature.from_dict(a.to_dict()) == a  # as the repository stores it
