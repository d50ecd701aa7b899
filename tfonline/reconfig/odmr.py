"""ODMR, TDR and node restarts: the online switch when the layout or the thread pools change.

Only what must move moves, and not at the switch. The placement map changes
as little as keeps the bytes balanced (:func:`tfonline.placement.relocate`);
a partition that stays is the same resource on the same node for the new
graphs. The workers resume on *transition graphs*, whose first step creates
each moved variable on its new node from its old location (see
:func:`tfonline._graph.build_worker_graph`); once they have, the workers go
on to the steady-state graphs and the old copies are released
(:func:`settle`). A node whose thread pools change restarts, and the
variables on it are read before and restored after. Each new worker skips
its share of the batches read so far (TDR, in :meth:`Engine.open`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import tensorflow as tf

from tfonline import _graph
from tfonline._calls import close_all, node_of, threads_of
from tfonline._sessions import Engine
from tfonline.placement import logical_name, recut_placement
from tfonline.reconfig.backend import SwitchContext, Switched
from tfonline.setting import short_form

logger = logging.getLogger("tfonline")


@dataclass
class Opened:
    """Graphs of a setting, with their sessions and steps once opened (None until then)."""

    graphs: list
    sessions: list | None = None
    steps: list | None = None
    apply: Any = None


@dataclass
class Prepared:
    """A switch's next setting, made ready while the workers still trained (see :func:`prepare`)."""

    setting: dict[str, Any]
    placement: list[int]
    moves: list = field(default_factory=list)  # the variables the new placement moves, created lazily
    steady: Opened | None = None
    transition: Opened | None = None  # when variables move: the graphs that create them at their first use
    nodes: tuple[int, ...] = ()  # the nodes it uses: a node lost since makes it stale

    def sessions(self) -> list:
        return [s for opened in (self.steady, self.transition) if opened for s in opened.sessions or ()]


def prepare(engine: Engine, old: dict[str, Any], new: dict[str, Any]) -> Prepared:
    """Makes what the switch to ``new`` needs ready while the workers still train under ``old``.

    The new placement, the variables it moves, the new layout's graphs (and
    the transition graphs that create the moved variables at their first
    use), and when no node restarts, the new sessions with their steps. At
    the switch there is then little left: start the input, swap.
    """
    placement = engine.placement
    if new["ps"] != old["ps"]:  # another cut of the large variables
        placement = recut_placement(engine.partitions_for(old["ps"]), placement, engine.partitions_for(new["ps"]),
                                    new["ps"])
    steady = engine.graphs_for(new, placement)
    # What lives on a restarting node is read and restored by the driver instead (all of its variable).
    restarted = engine.restarted_by(new)
    driven = by_the_driver(engine, restarted)
    moves = [m for m in _graph.moves_between(engine.graphs[0], steady[0]) if logical_name(m.name)[0] not in driven]
    transition = engine.graphs_for(new, placement, moves) if moves else None
    prepared = Prepared(dict(new), placement, moves, Opened(steady), Opened(transition) if moves else None,
                        tuple(engine.nodes_of(new)))
    if not restarted:
        for opened in (prepared.steady, prepared.transition):
            if opened is not None:
                opened.sessions = [engine.session(wg, new) for wg in opened.graphs]
                opened.steps, opened.apply = engine.make_steps(opened.sessions, opened.graphs, new)
    return prepared


def by_the_driver(engine: Engine, restarted: set[int]) -> set[str]:
    """The variables (logical names) a switch reads and restores by the driver: those with a block on a node it
    restarts (``restarted``)."""
    return {logical_name(name)[0] for name, v in engine.graphs[0].variables.items() if node_of(v.device) in restarted}


def relocate(engine: Engine, prepared: Prepared, old: dict[str, Any], new: dict[str, Any], technique: str,
             context: SwitchContext) -> Switched:
    """The switch from ``old`` to ``new`` with what was ``prepared``; transition steps when variables move."""
    old_chief = engine.graphs[0]
    marks = [("start", time.monotonic())]
    restarted = engine.restarted_by(new)
    driven = by_the_driver(engine, restarted)
    values = engine.read({name: v for name, v in old_chief.variables.items() if logical_name(name)[0] in driven})
    marks.append((f"read {len(values)} variables", time.monotonic()))
    # Blocks of a cut the new setting does not have, on nodes that do not restart: released now (the workers
    # are paused when a node restarts), or a later switch back to that cut would find them and keep them.
    first = prepared.transition or prepared.steady  # the graphs the workers resume on
    kept = first.graphs[0].variables
    _release(engine, [], [(_graph.Source(name, tuple(v.shape.as_list()), v.device), v.dtype.base_dtype)
                          for name, v in old_chief.variables.items()
                          if name in values and name not in kept and node_of(v.device) not in restarted])
    engine.retire_sessions(context.workers_running)
    engine.advance_input(context.batches_read())
    engine.cluster.set_threads_of({node: threads_of(new) for node in engine.nodes_of(new)})
    marks.append((f"restarted {len(restarted)} nodes", time.monotonic()))

    def carry() -> None:
        marks.append(("sessions", time.monotonic()))
        engine.restore(values)
        marks.append(("restored", time.monotonic()))

    steps, apply = engine.open(new, prepared.placement, carry, first if first.sessions else None, first.graphs)
    marks.append(("input" + ("" if first.sessions else ", probe and steps"), time.monotonic()))
    logger.info("reconfiguration %s -> %s by %s: %s", short_form(old), short_form(new), technique, ", ".join(
        f"{name} {b - a:.2f} s" for (_, a), (name, b) in zip(marks, marks[1:])))
    moved = int(sum(v.nbytes for v in values.values())) + sum(m.nbytes for m in prepared.moves)
    return Switched(steps, apply, moved, transition=bool(prepared.moves))


def settle(engine: Engine, prepared: Prepared, setting: dict[str, Any], swap: Callable[[list, Any], None]) -> None:
    """After the transition graphs' first step, once no step runs on the old setting's graphs: every moved
    variable lives at its new node.

    Makes sure of it (the ensure op is a no-op when the first step created
    them all), moves the workers to the steady-state graphs, which have no
    conditional (``swap`` hands the driver their steps; each worker takes
    its new step at its next iteration), and releases the old copies and the
    creation locks. A step still running on a transition graph finds every
    variable created and never reads an old copy or takes a lock, so
    releasing them now is safe; its session is closed once it has ended.
    """
    engine.sessions[0].run(engine.graphs[0].ensure_op)
    steady = prepared.steady
    if steady.sessions is None:  # nodes restarted at the switch: opened now
        steady.sessions = [engine.session(wg, setting) for wg in steady.graphs]
        steady.steps, steady.apply = engine.make_steps(steady.sessions, steady.graphs, setting)
    engine.retired += engine.sessions
    engine.graphs, engine.sessions = steady.graphs, steady.sessions
    swap(steady.steps, steady.apply)
    _release(engine, prepared.moves)
    logger.info("ODMR: %d moved variables live at their new nodes; old copies released", len(prepared.moves))


def _release(engine: Engine, moves: list, others: list = ()) -> None:
    """Releases the sources of ``moves`` and their creation locks, and ``others`` (see
    :func:`_graph.build_release_graph`), from the chief's node."""
    if not moves and not others:
        return
    graph, op = _graph.build_release_graph(moves, engine.container, others)
    nodes = {node_of(s.device) for m in moves for s in m.sources} | {node_of(m.destination) for m in moves}
    nodes |= {node_of(source.device) for source, _ in others}
    nodes.add(engine.graphs[0].worker_node)
    config = tf.compat.v1.ConfigProto(device_filters=[f"/job:node/task:{n}" for n in sorted(nodes)])
    with tf.compat.v1.Session(engine.cluster.target(engine.graphs[0].worker_node), graph=graph,
                              config=config) as session:
        session.run(op)


def discard(prepared: Prepared | None) -> None:
    """Closes the sessions of a preparation that will not be used."""
    if prepared is not None:
        close_all(prepared.sessions())
