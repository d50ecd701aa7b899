from __future__ import annotations

import random

import numpy as np
import pytest

from tfonline.placement import (Partition, balanced_placement, block_name, logical_name, ps_loads, recut,
                                recut_placement, relocate, row_ranges, shards_for)


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


def _cut(name: str, rows: int, count: int, slot: str = "") -> dict[str, tuple[int, ...]]:
    """The shapes of ``name`` cut into ``count`` blocks as TensorFlow's partitioner cuts rows (the first
    ``rows % count`` blocks one row longer), or whole when ``count`` is 1; with ``slot``, an optimizer slot's."""
    if count == 1:
        return {name + slot: (rows, 2)}
    return {block_name(f"{name}/part_{k}", count) + slot: (rows // count + (k < rows % count), 2)
            for k in range(count)}


def test_a_block_is_named_after_its_cut_and_knows_its_variable():
    assert block_name("scope/w/part_1", 3) == "scope/w/part_1_of_3"
    assert logical_name("scope/w/part_1_of_3") == ("scope/w", 1)
    assert logical_name("scope/w/part_12_of_13/Adagrad") == ("scope/w/Adagrad", 12)
    assert logical_name("scope/w/Adagrad") == ("scope/w/Adagrad", 0)  # a whole variable's slot
    assert logical_name("w/part_1") == ("w/part_1", 0)  # a user's own partitioner: whole to tfonline
    shapes = {**_cut("w", 10, 3), "b": (), **_cut("w", 10, 3, "/Adagrad")}
    assert row_ranges(shapes) == {
        "w/part_0_of_3": ("w", 0, 4), "w/part_1_of_3": ("w", 4, 7), "w/part_2_of_3": ("w", 7, 10), "b": ("b", 0, 1),
        "w/part_0_of_3/Adagrad": ("w/Adagrad", 0, 4), "w/part_1_of_3/Adagrad": ("w/Adagrad", 4, 7),
        "w/part_2_of_3/Adagrad": ("w/Adagrad", 7, 10)}


@pytest.mark.parametrize("old_count, new_count", [(1, 3), (3, 2), (2, 5), (5, 1), (4, 4), (7, 3)])
def test_recut_gives_each_new_block_its_rows_of_the_old_ones(old_count, new_count):
    rng = np.random.default_rng(old_count * 10 + new_count)
    full = rng.normal(size=(23, 2))
    slot = rng.normal(size=(23, 2))
    old = {**_cut("w", 23, old_count), **_cut("w", 23, old_count, "/Adagrad"), "step": ()}
    values = {}
    for name, (key, start, stop) in row_ranges(old).items():
        values[name] = np.int64(7) if key == "step" else (slot if key.endswith("Adagrad") else full)[start:stop]
    new = {**_cut("w", 23, new_count), **_cut("w", 23, new_count, "/Adagrad"), "step": ()}
    got = recut(values, new)
    assert set(got) == set(new) and got["step"] == 7
    for name, shape in new.items():
        assert got[name].shape == shape or name == "step"
    blocks = sorted((k, n) for n, (key, k, _) in row_ranges(new).items() if key == "w")
    assert np.array_equal(np.concatenate([got[n] for _, n in blocks]), full)
    slots = sorted((k, n) for n, (key, k, _) in row_ranges(new).items() if key == "w/Adagrad")
    assert np.array_equal(np.concatenate([got[n] for _, n in slots]), slot)


def test_recut_leaves_out_what_was_not_read_and_refuses_a_variable_read_in_part():
    values = {name: np.zeros(shape) for name, shape in _cut("w", 10, 2).items()}
    assert recut(values, {**_cut("w", 10, 3), "b": (4,)}).keys() == _cut("w", 10, 3).keys()  # b: not read
    del values["w/part_1_of_2"]
    with pytest.raises(ValueError, match=r"^w has 5 rows read, its blocks hold 10$"):
        recut(values, _cut("w", 10, 3))


def test_recut_placement_keeps_whole_variables_and_spreads_the_new_blocks():
    def parts(count):
        return ([Partition(n, s, "float32", 4 * s[0] * s[1]) for n, s in _cut("w", 1000, count).items()]
                + [Partition(f"small{i}", (10,), "float32", 40) for i in range(4)])

    old = parts(2)
    placement = balanced_placement(old, 2)
    new = parts(3)
    moved = recut_placement(old, placement, new, 3)
    small = [i for i, p in enumerate(new) if p.name.startswith("small")]
    was = [placement[old.index(new[i])] for i in small]
    scratch = balanced_placement(new, 3)
    # Fewer whole variables move than if they were placed again from scratch (only what evens the loads).
    assert sum(moved[i] != w for i, w in zip(small, was)) < sum(scratch[i] != w for i, w in zip(small, was))
    assert sorted(moved[:3]) == [0, 1, 2]  # one block per node
    assert max(ps_loads(new, moved, 3)) - min(ps_loads(new, moved, 3)) <= max(p.nbytes for p in new)
