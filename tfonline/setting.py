"""System settings: the eleven knobs of the paper's Table I.

A *setting* is a plain dict from knob name to value. It changes only how fast
a job runs, never what it learns. This module knows each knob's domain on a
given cluster, fills in defaults, validates, and turns a setting into the
``tf.compat.v1.ConfigProto`` a worker session is opened with (the thread
pools go to the node servers instead; see :mod:`tfonline.cluster`).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import Any, Callable

from tfonline.exceptions import ConfigurationError

JIT_LEVELS = ("OFF", "ON_1", "ON_2")
KINDS = ("int", "log-int", "bool", "ordinal", "nominal")
RECONFIGURATION_TYPES = ("I-a", "I-b", "II")
KIB = 1024
MIB = 1024 * 1024


@dataclass(frozen=True)
class Knob:
    """One knob: its domain and how a change of it is applied.

    ``reconfiguration`` is the paper's type: ``I-a`` (training data moves),
    ``I-b`` (model data moves) or ``II`` (system setting only).
    ``applied_by`` says where the value goes in TensorFlow. A knob the
    user adds has ``apply(config_proto, value)``, called on the
    ``ConfigProto`` of every training session, and may give a ``default``
    (else the first value of its domain).
    """

    name: str
    kind: str  # "int", "log-int", "bool", "ordinal", "nominal"
    reconfiguration: str
    applied_by: str
    low: int | None = None
    high: int | None = None
    choices: tuple | None = None
    apply: Callable[[Any, Any], None] | None = field(default=None, compare=False, repr=False)
    default: Any = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ConfigurationError(f"knob {self.name} must have a kind in {', '.join(KINDS)}, got {self.kind!r}")
        if self.reconfiguration not in RECONFIGURATION_TYPES:
            raise ConfigurationError(f"knob {self.name} must have a reconfiguration type in "
                                     f"{', '.join(RECONFIGURATION_TYPES)}, got {self.reconfiguration!r}")
        if self.kind in ("ordinal", "nominal"):
            if not self.choices:
                raise ConfigurationError(f"knob {self.name} ({self.kind}) needs a non-empty tuple of choices, "
                                         f"got {self.choices!r}")
        elif self.kind != "bool" and not (isinstance(self.low, int) and isinstance(self.high, int)
                                          and self.low <= self.high and (self.kind != "log-int" or self.low > 0)):
            raise ConfigurationError(f"knob {self.name} ({self.kind}) needs integers low <= high"
                                     f"{' (low > 0)' if self.kind == 'log-int' else ''}, got low={self.low!r}, "
                                     f"high={self.high!r}")

    def check(self, value: Any) -> Any:
        if self.kind == "bool":
            if not isinstance(value, bool):
                raise ConfigurationError(f"knob {self.name} must be True or False, got {value!r}")
            return value
        if self.kind in ("ordinal", "nominal"):
            if value not in self.choices:
                raise ConfigurationError(f"knob {self.name} must be one of {', '.join(self.choices)}, got {value!r}")
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigurationError(f"knob {self.name} must be an integer in [{self.low}, {self.high}], got {value!r}")
        if not self.low <= value <= self.high:
            raise ConfigurationError(f"knob {self.name} must be in [{self.low}, {self.high}], got {value}")
        return value


def knob_table(node_count: int, cores: int | None = None) -> dict[str, Knob]:
    """The knobs and their domains for a cluster of ``node_count`` nodes."""
    cores = cores or os.cpu_count() or 1
    session = "session ConfigProto"
    return {
        k.name: k
        for k in (
            Knob("ps", "int", "I-b", "cluster layout: parameter partitions placed on ps nodes", 1, node_count - 1),
            Knob("worker", "int", "I-a", "cluster layout: one model replica per worker node", 1, node_count - 1),
            Knob("intra_op_parallelism_threads", "int", "II", "node server config (node restart)", 1, cores),
            Knob("inter_op_parallelism_threads", "int", "II", "node server config (node restart)", 1, cores),
            Knob("do_common_subexpression_elimination", "bool", "II", session),
            Knob("max_folded_constant_in_bytes", "log-int", "II", session, KIB, 100 * MIB),
            Knob("do_function_inlining", "bool", "II", session),
            Knob("global_jit_level", "ordinal", "II", session + " (XLA; TF_XLA_FLAGS set on nodes)", choices=JIT_LEVELS),
            Knob("infer_shapes", "bool", "II", session),
            Knob("place_pruned_graph", "bool", "II", session),
            Knob("enable_bfloat16_sendrecv", "bool", "II", session),
        )
    }


KNOB_NAMES = tuple(knob_table(3, 1))
THREAD_KNOBS = ("intra_op_parallelism_threads", "inter_op_parallelism_threads")


def default_setting(node_count: int, cores: int | None = None) -> dict[str, Any]:
    """TensorFlow's own defaults, with one ps node and every other node a worker.

    TensorFlow's 0 for a thread pool means "one thread per core"; the setting
    spells that out so every value is in its knob's domain.
    """
    cores = cores or os.cpu_count() or 1
    return {
        "ps": 1,
        "worker": node_count - 1,
        "intra_op_parallelism_threads": cores,
        "inter_op_parallelism_threads": cores,
        "do_common_subexpression_elimination": True,
        "max_folded_constant_in_bytes": 10 * MIB,
        "do_function_inlining": True,
        "global_jit_level": "OFF",
        "infer_shapes": False,
        "place_pruned_graph": False,
        "enable_bfloat16_sendrecv": False,
    }


def resolve_setting(setting: dict[str, Any] | None, node_count: int, cores: int | None = None,
                    extra_knobs: tuple[Knob, ...] = ()) -> dict[str, Any]:
    """Fills ``setting`` up with defaults and validates every knob.

    Raises:
        ConfigurationError: an unknown knob, a value outside its domain, or
            more ps + worker nodes than the cluster has.
    """
    if setting is None:
        setting = {}
    if not isinstance(setting, dict):
        raise ConfigurationError(f"setting must be a dict of knob values, got {type(setting).__name__}")
    table = knob_table(node_count, cores)
    table.update({k.name: k for k in extra_knobs})
    unknown = sorted(set(setting) - set(table))
    if unknown:
        raise ConfigurationError(f"unknown knob {unknown[0]!r}; known knobs: {', '.join(table)}")
    resolved = default_setting(node_count, cores)
    for knob in extra_knobs:
        resolved[knob.name] = knob.default if knob.default is not None else (
            knob.choices[0] if knob.choices else False if knob.kind == "bool" else knob.low)
    if "ps" in setting and "worker" not in setting:
        resolved["worker"] = max(1, node_count - setting["ps"]) if isinstance(setting["ps"], int) else None
    resolved.update(setting)
    for name, knob in table.items():
        resolved[name] = knob.check(resolved[name])
    if resolved["ps"] + resolved["worker"] > node_count:
        raise ConfigurationError(
            f"ps + worker must be <= {node_count} (the cluster's nodes), got "
            f"{resolved['ps']} + {resolved['worker']} = {resolved['ps'] + resolved['worker']}"
        )
    return resolved


def setting_key(setting: dict[str, Any]) -> str:
    """A short stable id of a resolved setting."""
    blob = json.dumps(setting, sort_keys=True)
    return hashlib.sha1(blob.encode()).hexdigest()[:12]


def short_form(setting: dict[str, Any]) -> str:
    """``ps1 w2 t2/2 jit:OFF cse inl`` — a setting in one glance."""
    flags = [
        ("cse", "do_common_subexpression_elimination"),
        ("inl", "do_function_inlining"),
        ("shp", "infer_shapes"),
        ("prn", "place_pruned_graph"),
        ("bf16", "enable_bfloat16_sendrecv"),
    ]
    parts = [
        f"ps{setting['ps']}",
        f"w{setting['worker']}",
        f"t{setting['intra_op_parallelism_threads']}/{setting['inter_op_parallelism_threads']}",
        f"jit:{setting['global_jit_level']}",
        f"fold:{_bytes_short(setting['max_folded_constant_in_bytes'])}",
    ]
    parts += [short for short, knob in flags if setting[knob]]
    return " ".join(parts)


def _bytes_short(n: int) -> str:
    """``n`` bytes in KiB or MiB to three significant figures, never in exponent form (1,000-1,023 KiB read
    "1000K", not "1e+03K")."""
    for unit, size in (("M", MIB), ("K", KIB)):
        if n >= size:
            return f"{n / size:.3g}{unit}" if n / size < 999.5 else f"{n / size:.0f}{unit}"
    return str(n)


def session_config(setting: dict[str, Any], device_filters: list[str] | None = None,
                   extra_knobs: tuple[Knob, ...] = ()):
    """The ``ConfigProto`` a worker session is opened with for ``setting``.

    Thread pools are not set here: sessions on gRPC servers reject
    per-session pools, so they belong to the node servers.
    """
    import tensorflow as tf

    config = tf.compat.v1.ConfigProto()
    if device_filters:
        config.device_filters.extend(device_filters)
    graph = config.graph_options
    opt = graph.optimizer_options
    opt.do_common_subexpression_elimination = setting["do_common_subexpression_elimination"]
    opt.max_folded_constant_in_bytes = setting["max_folded_constant_in_bytes"]
    opt.do_function_inlining = setting["do_function_inlining"]
    opt.global_jit_level = tf.compat.v1.OptimizerOptions.GlobalJitLevel.Value(setting["global_jit_level"])
    graph.infer_shapes = setting["infer_shapes"]
    graph.place_pruned_graph = setting["place_pruned_graph"]
    graph.enable_bfloat16_sendrecv = setting["enable_bfloat16_sendrecv"]
    for knob in extra_knobs:
        knob.apply(config, setting[knob.name])
    return config

