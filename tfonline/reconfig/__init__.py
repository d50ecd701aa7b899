"""Online reconfiguration: what a setting change needs, and which technique does it.

A change from one setting to another is classified by the paper's types
(I-a: the worker set changes; I-b: the ps set changes; II: the setting
only) and turned into a :class:`Plan`: the actions that carry it out.

Built so far:

- **SSR, session knobs** (``technique "ssr"``): when only knobs applied
  through the session's ``ConfigProto`` change (the graph optimizer
  switches, XLA, bfloat16 transfers, users' added knobs), the workers
  close their sessions and open new ones with the new ``ConfigProto`` on
  the same graphs. Variables stay on the servers and each input iterator
  keeps its position (it has a shared name on its worker's server).
  Nothing is read, copied or restored.
- **Restart** (``technique "restart"``), everything else for now: read
  every variable, open sessions on the new layout's graphs (built the first
  time the job uses the layout, reused after), restarting nodes whose
  thread pools change, initialise, restore the values. A
  thread change restarts nodes; a layout change needs model relocation
  (ODMR) and data re-sharding (TDR), which are not built yet.

``run(reconfig="restart")`` makes every switch a restart.
``run(reconfig="checkpoint")`` is what existing systems do, the baseline
the online techniques are measured against: save a checkpoint with
``tf.compat.v1.train.Saver``, restart every node, build the graphs and
sessions anew, restore the checkpoint, resume.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from tfonline.exceptions import ConfigurationError
from tfonline.setting import Knob

__all__ = ["Plan", "plan", "check_technique", "TECHNIQUES", "THREAD_KNOBS"]

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
        technique: "ssr" or "restart" (what the repository records).
        actions: what the technique does, in order, in words (recorded too).
    """

    types: tuple[str, ...]
    changed: tuple[str, ...]
    technique: str
    actions: tuple[str, ...]


def check_technique(technique: Any) -> str:
    """``run(reconfig=...)``'s value, checked."""
    if technique not in TECHNIQUES:
        raise ConfigurationError(f"reconfig must be one of {', '.join(map(repr, TECHNIQUES))}, got {technique!r}")
    return technique


def plan(knobs: Mapping[str, Knob], old: Mapping[str, Any], new: Mapping[str, Any],
         technique: str = "online") -> Plan:
    """The plan for a switch from ``old`` to ``new``; ``technique="restart"`` forces the baseline."""
    check_technique(technique)
    changed = tuple(name for name in knobs if old.get(name) != new.get(name))
    types = tuple(sorted({knobs[name].reconfiguration for name in changed}))
    if not changed:
        return Plan(types, changed, "none", ())
    if technique == "checkpoint":
        return Plan(types, changed, "checkpoint", (
            "save a checkpoint (tf.compat.v1.train.Saver)", "restart every node", "build graphs and sessions",
            "restore the checkpoint"))
    session_only = all(name not in THREAD_KNOBS and name not in LAYOUT_KNOBS for name in changed)
    if technique == "online" and session_only:
        return Plan(types, changed, "ssr", ("reopen sessions with the new ConfigProto",))
    actions = ["read variables"]
    restarted = [name for name in changed if name in THREAD_KNOBS]
    if restarted:
        actions.append("restart nodes for new thread pools")
    actions += ["open sessions on the new layout's graphs (built on its first use) and initialise them "
                "(each worker skips its share of the batches read so far)", "restore variables"]
    return Plan(types, changed, "restart", tuple(actions))
