from __future__ import annotations

import random

import pytest

from tfonline.placement import Partition, balanced_placement, partition_count_for, ps_loads, shards_for


def _random_partitions(seed: int, n: int) -> list[Partition]:
    rng = random.Random(seed)
    return [Partition(f"v{i}", (rng.randint(1, 5000),), "float32", 4 * rng.randint(1, 5000)) for i in range(n)]


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("ps_count", [1, 2, 3, 5])
def test_balanced_placement_is_complete_deterministic_and_near_optimal(seed, ps_count):
    parts = _random_partitions(seed, 30)
    placement = balanced_placement(parts, ps_count)
    assert len(placement) == len(parts)
    assert set(placement) <= set(range(ps_count))
    assert placement == balanced_placement(parts, ps_count)
    loads = ps_loads(parts, placement, ps_count)
    assert sum(loads) == sum(p.nbytes for p in parts)
    lower_bound = max(sum(loads) / ps_count, max(p.nbytes for p in parts))
    assert max(loads) <= 4 / 3 * lower_bound + 1e-9  # the LPT guarantee


def test_equal_blocks_spread_evenly():
    parts = [Partition(f"w/part_{i}", (100, 1), "float32", 400) for i in range(8)]
    assert sorted(ps_loads(parts, balanced_placement(parts, 4), 4)) == [800] * 4


def test_zero_ps_is_an_error():
    with pytest.raises(ValueError, match="ps_count must be >= 1, got 0"):
        balanced_placement([], 0)


def test_only_large_variables_are_partitioned():
    assert shards_for((1 << 20, 1), 4, 8, 256 * 1024) == 8
    assert shards_for((1000, 10), 4, 8, 256 * 1024) == 1  # 40 KB: whole
    assert shards_for((4, 100000), 4, 8, 256 * 1024) == 1  # fewer rows than partitions
    assert shards_for((), 4, 8, 0) == 1
    assert partition_count_for(4) == 8 and partition_count_for(10) == 18
