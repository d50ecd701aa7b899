"""Where parameters live: logical partitions and their placement on ps nodes.

Pure functions, no TensorFlow. Parameters are cut into logical partitions:
a large variable into one row block per ps node (``w/part_0_of_2`` and
``w/part_1_of_2`` on two), a small one whole. A *placement map* assigns
each partition to one of the ps nodes so that bytes are balanced. A new ps
count cuts the large variables again (:func:`recut` says which rows of the
old blocks each new one takes), and :func:`recut_placement` keeps every
whole variable it can where it was.

Why not one cut for the whole job, fine enough for every ps count (the
paper's design)? Each block costs every step a gather and an update of its
own: on the benchmark's LogR here, six blocks on one ps ran 2.19 ms per
iteration against 1.63 ms for one block (34% more); the MLP, 2.55 against
2.19 ms (NOTES.md, 2026-11-24; ``benchmarks/engine_overhead.py --blocks 6``
measures the same on a plain training loop). A re-cut moves all of a large
variable's bytes once, lazily (ODMR); the finer cut costs its share every
step of the job.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

DEFAULT_PARTITION_MIN_BYTES = 256 * 1024


@dataclass(frozen=True)
class Partition:
    """One logical partition: a whole small variable or one block of a large one."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int


def shards_for(shape: tuple[int, ...], itemsize: int, partition_count: int, min_bytes: int) -> int:
    """How many row blocks a variable of ``shape`` is cut into."""
    if not shape or shape[0] < partition_count:
        return 1
    nbytes = itemsize
    for d in shape:
        nbytes *= d
    return partition_count if nbytes >= min_bytes else 1


def balanced_placement(partitions: list[Partition], ps_count: int) -> list[int]:
    """Assigns each partition a ps index, balancing bytes.

    Largest partition first onto the least loaded ps (ties to the lower
    index), which is within 4/3 of the optimal maximum load and
    deterministic for a given list.

    Returns:
        ``placement[i]`` is the ps index (0-based) of ``partitions[i]``.
    """
    if ps_count < 1:
        raise ValueError(f"ps_count must be >= 1, got {ps_count}")
    load = [0] * ps_count
    placement = [0] * len(partitions)
    order = sorted(range(len(partitions)), key=lambda i: (-partitions[i].nbytes, i))
    for i in order:
        target = min(range(ps_count), key=lambda p: (load[p], p))
        placement[i] = target
        load[target] += partitions[i].nbytes
    return placement


def relocate(partitions: list[Partition], placement: list[int], ps_count: int) -> list[int]:
    """The placement on ``ps_count`` nodes that moves as few partitions of ``placement`` as it can.

    Partitions on a node that goes away (index ``>= ps_count``) must move:
    largest first, each onto the least loaded remaining node. Then, while
    the most loaded node holds a partition smaller than the gap to the least
    loaded one, the partition that best evens the pair (size closest to half
    the gap) moves there. Each move strictly lowers the sum of squared
    loads, so this ends, and when it ends the most and least loaded nodes
    differ by less than the smallest partition on the most loaded one: by
    at most the largest partition. A partition that is not needed to reach
    that stays where it is.

    Returns:
        ``new[i]`` is the ps index of ``partitions[i]``; it differs from
        ``placement[i]`` only for partitions that move.
    """
    if ps_count < 1:
        raise ValueError(f"ps_count must be >= 1, got {ps_count}")
    if len(placement) != len(partitions):
        raise ValueError(f"placement must have one entry per partition ({len(partitions)}), got {len(placement)}")
    new = list(placement)
    load = [0] * ps_count
    for i, p in enumerate(new):
        if p < ps_count:
            load[p] += partitions[i].nbytes
    forced = sorted((i for i, p in enumerate(new) if p >= ps_count), key=lambda i: (-partitions[i].nbytes, i))
    for i in forced:
        target = min(range(ps_count), key=lambda p: (load[p], p))
        new[i] = target
        load[target] += partitions[i].nbytes
    while True:
        high = max(range(ps_count), key=lambda p: (load[p], -p))
        low = min(range(ps_count), key=lambda p: (load[p], p))
        gap = load[high] - load[low]
        movable = [i for i, p in enumerate(new) if p == high and partitions[i].nbytes < gap]
        if not movable:
            return new
        best = min(movable, key=lambda i: (abs(gap - 2 * partitions[i].nbytes), -partitions[i].nbytes, i))
        new[best] = low
        load[high] -= partitions[best].nbytes
        load[low] += partitions[best].nbytes


def ps_loads(partitions: list[Partition], placement: list[int], ps_count: int) -> list[int]:
    """Bytes held by each ps under ``placement``."""
    load = [0] * ps_count
    for part, p in zip(partitions, placement):
        load[p] += part.nbytes
    return load


# A block of a large variable, named after its cut: "w/part_1_of_2", or its optimizer slot "w/part_1_of_2/Adagrad".
_BLOCK = re.compile(r"^(?P<base>.+)/part_(?P<index>\d+)_of_\d+(?P<rest>/.*)?$")


def block_name(name: str, count: int) -> str:
    """The name of block ``name`` (TensorFlow's ``w/part_0``) of a variable cut into ``count``: ``w/part_0_of_2``.

    The count in the name lets the blocks of two cuts of one variable live
    side by side in the job's container while a switch re-cuts it.
    """
    return f"{name}_of_{count}"


def logical_name(name: str) -> tuple[str, int]:
    """The variable ``name`` is a block of, and the block's index: ``("w/Adagrad", 1)`` for
    ``w/part_1_of_2/Adagrad``; a whole variable is its own, block 0."""
    match = _BLOCK.match(name)
    if match is None:
        return name, 0
    return match["base"] + (match["rest"] or ""), int(match["index"])


def row_ranges(shapes: dict[str, tuple[int, ...]]) -> dict[str, tuple[str, int, int]]:
    """For each variable (name -> shape): its logical variable and the rows of it that it holds.

    A block's rows follow those of its lower-numbered blocks; a whole
    variable holds all of its rows (a scalar, its one row).
    """
    blocks: dict[str, list[tuple[int, str]]] = {}
    for name in shapes:
        key, index = logical_name(name)
        blocks.setdefault(key, []).append((index, name))
    ranges = {}
    for key, members in blocks.items():
        start = 0
        for _, name in sorted(members):
            rows = shapes[name][0] if shapes[name] else 1
            ranges[name] = (key, start, start + rows)
            start += rows
    return ranges


def recut(values: dict[str, np.ndarray], shapes: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    """The values of the variables ``shapes`` names (name -> shape), from ``values`` read under another cut.

    A variable ``values`` holds by name keeps its value; a block of another
    cut takes its rows of its logical variable, joined from the blocks
    ``values`` holds. Variables whose logical variable ``values`` does not
    hold are left out.

    Raises:
        ValueError: when ``values`` holds some blocks of a logical variable but not all of them.
    """
    read: dict[str, list[tuple[int, str]]] = {}
    for name, (key, start, _) in row_ranges({name: np.shape(value) for name, value in values.items()}).items():
        read.setdefault(key, []).append((start, name))
    wanted = row_ranges(shapes)
    rows: dict[str, int] = {}
    for key, _, stop in wanted.values():
        rows[key] = max(rows.get(key, 0), stop)
    whole: dict[str, np.ndarray] = {}  # each logical variable, joined once
    out = {}
    for name, (key, start, stop) in wanted.items():
        if name in values:
            out[name] = values[name]
        elif key in read:
            if key not in whole:
                whole[key] = np.concatenate([values[n] for _, n in sorted(read[key])])
                if len(whole[key]) != rows[key]:
                    raise ValueError(f"{key} has {len(whole[key])} rows read, its blocks hold {rows[key]}")
            out[name] = whole[key][start:stop]
    return out


def recut_placement(old: list[Partition], placement: list[int], new: list[Partition], ps_count: int) -> list[int]:
    """The placement of ``new`` partitions (another cut of the partitions ``old``, placed by ``placement``) on
    ``ps_count`` nodes: a partition of both stays where it was unless the balance needs it elsewhere, and
    each new block goes where :func:`relocate` puts a partition that must move."""
    where = {part.name: index for part, index in zip(old, placement)}
    return relocate(new, [where.get(part.name, ps_count) for part in new], ps_count)
