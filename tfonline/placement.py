"""Where parameters live: logical partitions and their placement on ps nodes.

Pure functions, no TensorFlow. Parameters are cut once, at job start, into
logical partitions (a large variable into ``partition_count`` row blocks, a
small one whole); a *placement map* then assigns each partition to one of
the ps nodes so that bytes are balanced. A new ps count changes only the map,
and :func:`relocate` changes it as little as it can.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DEFAULT_PARTITION_MIN_BYTES = 256 * 1024


@dataclass(frozen=True)
class Partition:
    """One logical partition: a whole small variable or one block of a large one."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int


def partition_count_for(node_count: int, fixed_ps: int | None = None) -> int:
    """P, the row blocks of a large variable, fixed per job.

    A job that never switches (``fixed_ps``, its ps count) cuts it once per
    ps node: its blocks never move. A job that may switch: a multiple of
    every possible ps count when one is at most twice the largest (1, 2 and
    6 blocks for at most 1, 2 and 3 ps nodes: any ps count then holds equal
    shares), else twice the largest (loads within a block of even). Each block costs every step a gather and a sparse update
    (about 0.13 ms on LogR here), so no more than that.
    """
    if fixed_ps is not None:
        return fixed_ps
    most = max(1, node_count - 1)
    common = math.lcm(*range(1, most + 1))
    return common if common <= 2 * most else 2 * most


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
