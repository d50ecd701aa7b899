"""Where parameters live: logical partitions and their placement on ps nodes.

Pure functions, no TensorFlow. Parameters are cut once, at job start, into
logical partitions (a large variable into ``partition_count`` row blocks, a
small one whole); a *placement map* then assigns each partition to one of
the ps nodes so that bytes are balanced. A new ps count changes only the map.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_PARTITION_MIN_BYTES = 256 * 1024


@dataclass(frozen=True)
class Partition:
    """One logical partition: a whole small variable or one block of a large one."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int


def partition_count_for(node_count: int) -> int:
    """P, fixed per job: more than the largest possible ps count, at least 8."""
    return max(8, 2 * (node_count - 1))


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


def ps_loads(partitions: list[Partition], placement: list[int], ps_count: int) -> list[int]:
    """Bytes held by each ps under ``placement``."""
    load = [0] * ps_count
    for part, p in zip(partitions, placement):
        load[p] += part.nbytes
    return load
