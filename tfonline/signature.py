"""A workload's signature: what makes two jobs' system behaviour alike or not.

Two jobs of a sweep (the same model with another learning rate) train the
same variables with the same ops on the same batches: their best settings
are alike, whatever their names. A signature records what decides that,
read from the job's graph once, before any node starts:

- the model's variables: how many, their bytes, the largest, whether one
  is cut across the ps nodes (large enough) and whether it is read
  sparsely (its gradient is ``IndexedSlices``: an embedding lookup);
- the work of a step: the graph's op count and an estimate of the
  multiply-adds per example of the forward pass (matrix products and
  convolutions, from their static shapes);
- the input: the batch size (when static) and each example's shapes;
- the optimizer's class and the mode.

:func:`distance` compares two (0: alike). The functions here but
:func:`signature` need no TensorFlow.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

# Weights of distance(): a factor of e in bytes, work or batch counts 1; so does another optimizer or mode.
CATEGORY_WEIGHT = 1.0
LAYOUT_WEIGHT = 0.5


@dataclass(frozen=True)
class Signature:
    variables: int
    parameter_bytes: int
    largest_bytes: int
    partitioned: bool
    sparse_reads: bool
    ops: int
    madds_per_example: float
    batch_size: int | None
    example_shapes: tuple[tuple[int | None, ...], ...]
    optimizer: str
    mode: str

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["example_shapes"] = [list(shape) for shape in self.example_shapes]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Signature:
        return cls(**{**data, "example_shapes": tuple(tuple(s) for s in data["example_shapes"])})

    def describe(self) -> str:
        """One line for the report."""
        parts = [f"{self.variables} variable{'s' if self.variables != 1 else ''}, {_size(self.parameter_bytes)}"
                 f" (largest {_size(self.largest_bytes)}{', cut across the ps nodes' if self.partitioned else ''})"]
        if self.sparse_reads:
            parts.append("sparse reads")
        parts.append(f"{_count(self.madds_per_example)} multiply-adds per example, {self.ops} ops")
        parts.append(f"batch {self.batch_size if self.batch_size is not None else 'unknown'}")
        parts += [self.optimizer, self.mode]
        return ", ".join(parts)


def distance(a: Signature, b: Signature) -> float:
    """How unlike two workloads are: 0 for the same signature, symmetric, growing with the log-ratios of
    their parameter bytes, work per example and batch size, plus :data:`CATEGORY_WEIGHT` for another
    optimizer, mode or sparse reading and :data:`LAYOUT_WEIGHT` for another cut (partitioned or not)."""
    d = _log_ratio(a.parameter_bytes, b.parameter_bytes) + _log_ratio(a.madds_per_example, b.madds_per_example)
    if a.batch_size and b.batch_size:
        d += _log_ratio(a.batch_size, b.batch_size)
    elif a.batch_size != b.batch_size:
        d += CATEGORY_WEIGHT
    d += CATEGORY_WEIGHT * ((a.optimizer != b.optimizer) + (a.mode != b.mode) + (a.sparse_reads != b.sparse_reads))
    d += LAYOUT_WEIGHT * (a.partitioned != b.partitioned)
    return d


def _log_ratio(x: float, y: float) -> float:
    return abs(math.log((x + 1.0) / (y + 1.0)))


def _size(nbytes: int) -> str:
    for unit, scale in (("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes} B"


def _count(n: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:.0f}"


def signature(job, min_bytes: int, mode: str) -> Signature:
    """Reads ``job``'s signature from its graph, built once, whole, on no device. A variable of at least
    ``min_bytes`` (and two rows) is one the job cuts across its ps nodes."""
    import tensorflow as tf

    from tfonline._graph import PartitioningRule, build_model, gradients_of, input_iterator

    rule = PartitioningRule(1, min_bytes)  # one block: every variable whole
    graph = tf.Graph()
    created: list = []

    def recording_creator(next_creator, **kwargs):
        variable = next_creator(**kwargs)
        created.append(variable)
        return variable

    with graph.as_default():
        _, features, labels = input_iterator(job, 0, 1)
        loss = build_model(job, features, labels, rule, recording_creator)
        forward = graph.get_operations()  # the work is counted on the forward pass (the backward's is about 2x)
        optimizer = job.optimizer_fn()
        grads = gradients_of(optimizer, loss)
    sizes = [v.dtype.size * math.prod(v.shape.as_list()) for v in created]
    flat = tf.nest.flatten(features) + tf.nest.flatten(labels)
    batch = flat[0].shape[0] if flat[0].shape.rank else None
    return Signature(
        variables=len(created), parameter_bytes=sum(sizes), largest_bytes=max(sizes, default=0),
        partitioned=any(size >= min_bytes and v.shape.as_list()[:1] >= [2] for size, v in zip(sizes, created)),
        sparse_reads=any(isinstance(g, tf.IndexedSlices) for g, _ in grads),
        ops=len(graph.get_operations()), madds_per_example=_madds_per_example(forward, batch),
        batch_size=batch, example_shapes=tuple(tuple(t.shape.as_list()[1:]) for t in flat),
        optimizer=type(optimizer).__name__, mode=mode)


def _madds_per_example(ops, batch: int | None) -> float:
    """Multiply-adds of the matrix products and convolutions among ``ops`` from their static shapes (an
    unknown dimension, the batch's as a rule, counts as 1), per example when the batch size is known."""
    total = 0.0
    for op in ops:
        if op.type in ("MatMul", "BatchMatMulV2", "BatchMatMulV3"):
            a, b = ([d or 1 for d in t.shape.as_list()] for t in op.inputs[:2])
            flags = ("transpose_a", "transpose_b") if op.type == "MatMul" else ("adj_x", "adj_y")
            rows, inner = (a[-1], a[-2]) if op.get_attr(flags[0]) else (a[-2], a[-1])
            cols = b[-2] if op.get_attr(flags[1]) else b[-1]
            total += math.prod(a[:-2]) * rows * inner * cols
        elif op.type == "Conv2D":
            out = [d or 1 for d in op.outputs[0].shape.as_list()]
            kernel = [d or 1 for d in op.inputs[1].shape.as_list()]
            total += math.prod(out) * kernel[0] * kernel[1] * kernel[2]
    return total / batch if batch else total
