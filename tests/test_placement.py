from __future__ import annotations

import random

import pytest

from tfonline.placement import Partition, balanced_placement, partition_count_for, ps_loads, relocate, shards_for


pytestmark = pytest.mark.fast  # no TensorFlow cluster: `pytest -m fast` runs these in under a minute


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
    assert [partition_count_for(n) for n in (2, 3, 4, 5, 10)] == [1, 2, 6, 8, 18]
    assert partition_count_for(4, fixed_ps=3) == 3 and partition_count_for(10, fixed_ps=1) == 1


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("old_count, new_count", [(1, 3), (3, 2), (2, 5), (5, 1), (4, 4)])
def test_relocate_moves_only_what_it_must_and_keeps_bytes_balanced(seed, old_count, new_count):
    parts = _random_partitions(seed, 30)
    old = balanced_placement(parts, old_count)
    new = relocate(parts, old, new_count)
    assert len(new) == len(parts) and set(new) <= set(range(new_count))
    loads = ps_loads(parts, new, new_count)
    assert max(loads) - min(loads) <= max(p.nbytes for p in parts)
    moved = [i for i in range(len(parts)) if new[i] != old[i]]
    assert {i for i in range(len(parts)) if old[i] >= new_count} <= set(moved)  # every partition of a gone node
    # Fewer partitions move than if the job placed them again from scratch, as checkpoint-restart does.
    scratch = balanced_placement(parts, new_count)
    assert len(moved) <= sum(a != b for a, b in zip(old, scratch)) or old_count == new_count
    assert relocate(parts, new, new_count) == new  # a balanced placement stays put


@pytest.mark.parametrize("old_count, new_count, moves", [(1, 2, 4), (2, 3, 2), (3, 2, 2), (2, 4, 4), (4, 1, 6)])
def test_relocate_moves_the_fewest_equal_blocks(old_count, new_count, moves):
    """Equal blocks: the least any placement with loads within one block of each other can move."""
    parts = [Partition(f"w/part_{i}", (100, 1), "float32", 400) for i in range(8)]
    new = relocate(parts, balanced_placement(parts, old_count), new_count)
    assert sum(a != b for a, b in zip(balanced_placement(parts, old_count), new)) == moves
    assert max(ps_loads(parts, new, new_count)) - min(ps_loads(parts, new, new_count)) <= 400


def test_relocate_refuses_a_placement_of_another_length():
    parts = [Partition("a", (1,), "float32", 4)]
    with pytest.raises(ValueError, match="placement must have one entry per partition \\(1\\), got 2"):
        relocate(parts, [0, 0], 2)
    with pytest.raises(ValueError, match="ps_count must be >= 1, got 0"):
        relocate(parts, [0], 0)
