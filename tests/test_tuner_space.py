"""The tuning space: domains from the cluster, pins, narrowed domains, added knobs, encoding, bad input."""

from __future__ import annotations

import random

import pytest

from tfonline.exceptions import ConfigurationError
from tfonline.setting import Knob, resolve_setting
from tfonline.reconfig import reconfiguration_types
from tfonline.tuner.space import KnobSpace, knob_values


pytestmark = pytest.mark.fast  # no TensorFlow cluster: `pytest -m fast` runs these in under a minute


def test_domains_come_from_the_cluster():
    space = KnobSpace(5, 4)
    assert space.values["ps"] == [1, 2, 3, 4] and space.values["worker"] == [1, 2, 3, 4]
    assert space.values["intra_op_parallelism_threads"] == [1, 2, 3, 4]
    assert space.values["global_jit_level"] == ["OFF", "ON_1", "ON_2"]
    folded = space.values["max_folded_constant_in_bytes"]
    assert folded[0] == 1024 and folded[-1] == 100 * 1024 * 1024 and 10 * 1024 * 1024 in folded  # the default
    assert {space.knobs[n].reconfiguration for n in ("ps", "worker", "global_jit_level")} == {"I-b", "I-a", "II"}


def test_pin_and_narrow():
    space = KnobSpace(5, 4, {"global_jit_level": "OFF", "worker": [1, 3]})
    assert space.pinned == {"global_jit_level": "OFF"}
    assert "global_jit_level" not in space.free and space.values["worker"] == [1, 3]
    rng = random.Random(0)
    for _ in range(50):
        s = space.sample(rng)
        assert s["global_jit_level"] == "OFF" and s["worker"] in (1, 3) and s["ps"] + s["worker"] <= 5
        assert space.contains(s)


def test_samples_respect_the_node_count():
    space = KnobSpace(3, 2)
    rng = random.Random(1)
    samples = [space.sample(rng) for _ in range(100)]
    assert all(s["ps"] + s["worker"] <= 3 for s in samples)
    assert {(s["ps"], s["worker"]) for s in samples} == {(1, 1), (1, 2), (2, 1)}


def test_encoding_round_trips():
    space = KnobSpace(5, 4)
    rng = random.Random(2)
    for _ in range(20):
        s = space.sample(rng)
        assert space.decode(space.encode(s)) == s
    assert space.encode_value("max_folded_constant_in_bytes", 10_000) == pytest.approx(4.0)  # log10


def test_counts_that_span_a_factor_of_8_are_encoded_in_logs():
    large, small = KnobSpace(36, 8), KnobSpace(5, 4)
    assert [large.encode_value(name, 16) for name in ("ps", "worker")] == [4.0, 4.0]  # 1-35: log2
    assert large.encode_value("intra_op_parallelism_threads", 8) == 3.0  # 1-8
    assert [small.encode_value(name, 4) for name in ("ps", "worker", "intra_op_parallelism_threads")] == [4, 4, 4]
    rng = random.Random(3)
    for _ in range(20):
        s = large.sample(rng)
        assert large.decode(large.encode(s)) == s


def test_an_added_knob_is_tuned_and_applied():
    calls = []
    knob = Knob("rewrite_arithmetic", "nominal", "II", "session ConfigProto", choices=("DEFAULT", "ON", "OFF"),
                apply=lambda config, value: calls.append(value))
    space = KnobSpace(4, 2, extra_knobs=[knob])
    assert "rewrite_arithmetic" in space.free and space.defaults["rewrite_arithmetic"] == "DEFAULT"
    domain = {d["name"]: d for d in space.gpyopt_domain()}
    assert domain["rewrite_arithmetic"]["type"] == "categorical"
    setting = resolve_setting({"rewrite_arithmetic": "ON"}, 4, 2, extra_knobs=(knob,))
    from tfonline.setting import session_config

    session_config(setting, extra_knobs=(knob,))
    assert calls == ["ON"]


def test_reconfiguration_types():
    space = KnobSpace(4, 2)
    base = space.start(resolve_setting({}, 4, 2))
    assert reconfiguration_types(space.knobs, base, dict(base, worker=1)) == ["I-a"]
    assert reconfiguration_types(space.knobs, base, dict(base, ps=2, worker=2, infer_shapes=True)) == ["I-a", "I-b", "II"]
    assert reconfiguration_types(space.knobs, base, base) == []


def test_log_grid():
    knob = Knob("x", "log-int", "II", "session", 10, 5000)
    assert knob_values(knob) == [10, 100, 1000, 5000]


@pytest.mark.parametrize("restrict, message", [
    ({"threads": 2}, "space names an unknown knob 'threads'; known knobs: ps, worker, "),
    ({"worker": []}, "space gives knob worker an empty list of values"),
    ({"worker": 7}, r"knob worker must be in \[1, 3\], got 7"),
    ({"global_jit_level": ["OFF", "MAX"]}, "knob global_jit_level must be one of OFF, ON_1, ON_2, got 'MAX'"),
    ({"ps": 3, "worker": [2, 3]}, r"space leaves no value of ps with ps \+ worker <= 4"),
    ("worker=2", "space must be a dict of knob name to a value or a list of values, got str"),
])
def test_invalid_spaces(restrict, message):
    with pytest.raises(ConfigurationError, match=message):
        KnobSpace(4, 2, restrict)


@pytest.mark.parametrize("knob, message", [
    (Knob("ps", "int", "II", "x", 1, 2, apply=print), "extra knob 'ps' already exists; pin or narrow it with space"),
    (Knob("y", "int", "I-a", "x", 1, 2, apply=print), "extra knob 'y' must be of reconfiguration type II with an "
                                                      "apply"),
    (Knob("y", "int", "II", "x", 1, 2), "extra knob 'y' must be of reconfiguration type II with an apply"),
    ("y", "extra_knobs must hold tfonline.setting.Knob objects, got 'y'"),
])
def test_invalid_added_knobs(knob, message):
    with pytest.raises(ConfigurationError, match=message):
        KnobSpace(4, 2, extra_knobs=[knob])


@pytest.mark.parametrize("kwargs, message", [
    (dict(name="z", kind="float", reconfiguration="II", applied_by="x"), "knob z must have a kind in int, log-int"),
    (dict(name="z", kind="int", reconfiguration="III", applied_by="x", low=1, high=2),
     "knob z must have a reconfiguration type in I-a, I-b, II, got 'III'"),
    (dict(name="z", kind="nominal", reconfiguration="II", applied_by="x"),
     r"knob z \(nominal\) needs a non-empty tuple of choices, got None"),
    (dict(name="z", kind="int", reconfiguration="II", applied_by="x", low=3, high=1),
     r"knob z \(int\) needs integers low <= high, got low=3, high=1"),
])
def test_invalid_knob_definitions(kwargs, message):
    with pytest.raises(ConfigurationError, match=message):
        Knob(**kwargs)


def test_a_start_outside_the_space():
    space = KnobSpace(4, 2, {"worker": [1, 2]})
    with pytest.raises(ConfigurationError,
                       match=r"the starting setting's worker=3 is outside the tuning space \[1, 2\]"):
        space.start(resolve_setting({"worker": 3}, 4, 2))


def test_after_a_node_is_lost_samples_fit_the_nodes_left():
    space = KnobSpace(3, 2)
    space.nodes_alive = 2
    rng = random.Random(1)
    assert {(s["ps"], s["worker"]) for s in (space.sample(rng) for _ in range(50))} == {(1, 1)}
    assert not space.fits({"ps": 1, "worker": 2}) and space.contains({**space.defaults, "ps": 1, "worker": 2})


def test_the_grid_of_every_setting_is_the_feasible_product_and_read_by_distinct_values():
    """The settings EI is maximised over (tfonline.tuner.grid): every combination of the free knobs' values
    with ps + worker within the nodes alive, made again when a node is lost; a knob's values per row, read
    through its distinct codes, as the settings themselves decode."""
    from tfonline.tuner.grid import SettingGrid, values_of

    space = KnobSpace(4, 2, {"max_folded_constant_in_bytes": 1024, "infer_shapes": False})
    choices = [sorted({space.encode_value(name, v) for v in space.values[name]}) for name in space.free]
    grid = SettingGrid(space)
    rows = grid.rows(choices)
    settings = [space.decode(row) for row in rows]
    every = 1
    for values in space.values.values():
        every *= len(values) if len(values) > 1 else 1
    assert len({tuple(sorted(s.items())) for s in settings}) == len(rows) < every
    assert all(s["ps"] + s["worker"] <= 4 for s in settings) and {(s["ps"], s["worker"]) for s in settings} == {
        (p, w) for p in range(1, 4) for w in range(1, 4) if p + w <= 4}
    assert grid.rows(choices) is rows  # kept
    names = ("worker", "global_jit_level", "infer_shapes")  # a pinned knob too
    values, inverse = values_of(space, rows, names)
    assert len(values) == len(set(values)) == 3 * 3
    assert [values[i] for i in inverse] == [tuple(s[name] for name in names) for s in settings]
    kept = grid.values_of(rows, names)
    assert kept is grid.values_of(rows, list(names)) and kept[0] == values and (kept[1] == inverse).all()
    assert grid.values_of(rows.copy(), names) is not kept  # other rows: read, not kept
    space.nodes_alive = 3
    fewer = grid.rows(choices)
    assert all(s["ps"] + s["worker"] <= 3 for s in map(space.decode, fewer))
    values, inverse = grid.values_of(fewer, names)  # the grid made again reads its own rows
    assert [values[i] for i in inverse] == [tuple(s[name] for name in names) for s in map(space.decode, fewer)]
