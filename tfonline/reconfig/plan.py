"""What a setting change needs: its types, the parts whose costs the tuner learns, and its :class:`Plan`.

The classification of a change lives here, once: the tuner names a
decision's plan with :func:`plan`, and the driver carries it out with the
technique the plan names (see :mod:`tfonline.reconfig`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from tfonline.exceptions import ConfigurationError
from tfonline.setting import Knob

# What run(reconfig=...) accepts.
TECHNIQUES = ("online", "restart", "checkpoint")
# Knobs that live in the node servers' config: a change restarts the node.
THREAD_KNOBS = ("intra_op_parallelism_threads", "inter_op_parallelism_threads")
LAYOUT_KNOBS = ("ps", "worker")


@dataclass(frozen=True)
class Plan:
    """How a switch is carried out.

    Attributes:
        types: the paper's types the change involves, sorted ("I-a", "I-b", "II").
        changed: the knobs whose values change, in knob-table order.
        technique: what the repository records: "ssr", "odmr", "tdr" joined
            by "+" as the change needs them; "restart" or "checkpoint" for the baselines.
        actions: what the technique does, in order, in words (recorded too).
    """

    types: tuple[str, ...]
    changed: tuple[str, ...]
    technique: str
    actions: tuple[str, ...]

    @property
    def sessions_only(self) -> bool:
        """Whether new sessions on the same graphs and nodes do it."""
        return all(name not in THREAD_KNOBS and name not in LAYOUT_KNOBS for name in self.changed)


def check_technique(technique: Any) -> str:
    """``run(reconfig=...)``'s value, checked."""
    if technique not in TECHNIQUES:
        raise ConfigurationError(f"reconfig must be one of {', '.join(map(repr, TECHNIQUES))}, got {technique!r}")
    return technique


def plan(knobs: Mapping[str, Knob], old: Mapping[str, Any], new: Mapping[str, Any],
         technique: str = "online") -> Plan:
    """The plan for a switch from ``old`` to ``new``; ``technique`` "restart" or "checkpoint" forces a baseline."""
    check_technique(technique)
    changed = tuple(name for name in knobs if old.get(name) != new.get(name))
    types = tuple(sorted({knobs[name].reconfiguration for name in changed}))
    if not changed:
        return Plan(types, changed, "none", ())
    if technique == "checkpoint":
        return Plan(types, changed, "checkpoint", (
            "save a checkpoint (tf.compat.v1.train.Saver)", "restart every node", "build graphs and sessions",
            "restore the checkpoint"))
    threads = any(name in THREAD_KNOBS for name in changed)
    layout = any(name in LAYOUT_KNOBS for name in changed)
    if technique == "restart":
        return Plan(types, changed, "restart", tuple(
            ["read variables"] + (["restart nodes for new thread pools"] if threads else [])
            + ["open sessions on the new layout's graphs (built on its first use) and initialise them "
               "(each worker skips its share of the batches read so far)", "restore variables"]))
    if not (threads or layout):
        return Plan(types, changed, "ssr", ("reopen sessions with the new ConfigProto",))
    actions, parts = [], []
    if threads:
        actions += ["read the variables on ps nodes whose thread pools change",
                    "restart the nodes whose thread pools change (a given node restarts itself, in place)"]
    if "ps" in changed:
        parts.append("odmr")
        actions.append("create each partition the new placement map moves on its new node at its first use, "
                       "from its old location; then release the old copies")
    if layout:
        parts.append("tdr")
        actions.append("re-shard the input over the new workers (each skips its share of the batches read so far)")
    if threads:
        actions.append("restore the variables read from restarted nodes")
    if any(knobs[name].reconfiguration == "II" for name in changed):
        parts.append("ssr")
    actions.append("open sessions on the new setting's graphs")
    return Plan(types, changed, "+".join(parts), tuple(actions))


def relocation(knobs: Mapping[str, Knob], old: Mapping[str, Any], new: Mapping[str, Any]) -> Plan:
    """The plan for a switch off a node that leaves the job (a planned drain), from ``old`` to ``new`` (maybe
    ``old`` itself) on the nodes left: ODMR moves what the ps nodes hold to their new nodes, TDR re-shards the
    input over the workers, whichever of them the node was."""
    return plan(knobs, dict(old, **{name: None for name in LAYOUT_KNOBS}), new)


def reconfiguration_types(knobs: Mapping[str, Knob], old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """The paper's reconfiguration types a change from ``old`` to ``new`` involves, sorted."""
    return sorted({knobs[name].reconfiguration for name in knobs if old.get(name) != new.get(name)})


# Knobs whose switch costs depend on the value switched to, and the value
# that costs nothing extra: turning XLA on compiles the graph at the first
# step, turning it off does not.
COMPILING_KNOBS = {"global_jit_level": "OFF"}


def switch_parts(knobs: Mapping[str, Knob], old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, str]:
    """What a switch from ``old`` to ``new`` changes, in the parts whose costs the tuner learns.

    Each changed knob is a part, named after the knob, of its reconfiguration
    type. A :data:`COMPILING_KNOBS` knob at a compiling value in ``new`` is
    the part ``"knob=value"`` of type ``"compile"`` whenever anything
    changes, even when it was on before: a switch builds new graphs and
    sessions, and XLA compiles them again (11.3 s for a thread switch with
    XLA staying at ON_2 on LogR, where turning it on had cost about as much).
    """
    parts = {}
    for name, knob in knobs.items():
        if old.get(name) == new.get(name):
            continue
        if name in COMPILING_KNOBS and new.get(name) != COMPILING_KNOBS[name]:
            continue  # below
        parts[name] = knob.reconfiguration
    if parts or any(old.get(n) != new.get(n) for n in COMPILING_KNOBS):
        for name, off in COMPILING_KNOBS.items():
            if name in knobs and new.get(name) not in (None, off):
                parts[f"{name}={new[name]}"] = "compile"
    return parts
