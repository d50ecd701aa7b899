"""What the examples share: their command line, and the sparse examples' input."""

from __future__ import annotations

import argparse
from typing import Callable

import tfonline
from tfonline.data import hashed_sparse_dataset, libsvm_dataset


def run_example(make_job: Callable, description: str, add_arguments: Callable | None = None, argv=None):
    """Parses the common options (and the example's own), runs the job, prints the result."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--db", default="runs.db", help="the SQLite repository (default: runs.db)")
    parser.add_argument("--ps", type=int, default=1, help="parameter-server nodes (default: 1)")
    parser.add_argument("--worker", type=int, default=2, help="worker nodes (default: 2)")
    parser.add_argument("--mode", default="async", choices=["async", "sync"])
    parser.add_argument("--max-steps", type=int)
    parser.add_argument("--tune", action="store_true",
                        help="tune the setting while training, starting from --ps/--worker")
    if add_arguments:
        add_arguments(parser)
    args = parser.parse_args(argv)
    result = make_job(args).run(setting={"ps": args.ps, "worker": args.worker}, db=args.db, mode=args.mode,
                                max_steps=args.max_steps, tune=args.tune)
    print(result)
    return result


class SparseExample(tfonline.MLJobFramework):
    """Input shared by the sparse examples: generated Criteo-like data, or a libsvm file.

    ``labels`` is ``"01"`` (logistic regression) or ``"pm1"`` (SVM).
    """

    labels = "01"
    data_seed = 0
    hash_bits = 20
    categories_per_field = 1000
    signal = 3.0

    def __init__(self, libsvm: str | None = None, max_nnz: int = 26):
        self.libsvm, self.num_features, self.max_nnz = libsvm, 1 << self.hash_bits, max_nnz

    def input_fn(self, shard, num_shards, skip=None):  # skip: the batches skipped are neither read nor made
        if self.libsvm:
            return libsvm_dataset(self.libsvm, shard, num_shards, num_features=self.num_features,
                                  max_nnz=self.max_nnz, batch_size=64, labels=self.labels, skip=skip)
        ds = hashed_sparse_dataset(shard, num_shards, batch_size=64, hash_bits=self.hash_bits,
                                   categories_per_field=self.categories_per_field, signal=self.signal,
                                   seed=self.data_seed, skip=skip)
        if self.labels == "pm1":
            ds = ds.map(lambda features, y: (features, 2.0 * y - 1.0))
        return ds


def add_libsvm_argument(parser) -> None:
    parser.add_argument("--libsvm", help="train on this libsvm-format file instead of generated data")
