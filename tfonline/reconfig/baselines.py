"""The baselines the online techniques are measured against: ``run(reconfig="restart")`` and ``"checkpoint"``.

Both read or save every variable and build the new setting's sessions
anew; neither is prepared ahead. Each worker skips its share of the
batches the job has read so far, so the job reads on instead of seeing its
first batches again.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from typing import Any, Callable

from tfonline._calls import threads_of
from tfonline._sessions import Engine
from tfonline.cluster import LocalCluster
from tfonline.placement import balanced_placement
from tfonline.reconfig.backend import SwitchContext, Switched
from tfonline.setting import short_form

logger = logging.getLogger("tfonline")


def restart(engine: Engine, old: dict[str, Any], new: dict[str, Any], context: SwitchContext) -> Switched:
    """Reads every variable, opens sessions on the new setting's graphs (restarting nodes whose thread pools
    change), initialises and restores the values.

    The graphs of a layout are built the first time the job uses it and
    reused after; every layout's variables live in the job's one container,
    which is dropped when the job ends.
    """
    marks = [("start", time.monotonic())]
    values = engine.read(engine.graphs[0].variables)
    marks.append(("read variables", time.monotonic()))
    moved = int(sum(getattr(v, "nbytes", 0) for v in values.values()))
    engine.close_sessions()
    engine.advance_input(context.batches_read())
    marks.append(("closed sessions", time.monotonic()))
    engine.cluster.set_threads_of({node: threads_of(new) for node in engine.nodes_of(new)})
    marks.append(("node restarts", time.monotonic()))
    steps, apply = engine.open(new, balanced_placement(engine.partitions_for(new["ps"]), new["ps"]))
    marks.append(("new graphs and sessions", time.monotonic()))
    engine.restore(values)
    marks.append(("restored variables", time.monotonic()))
    logger.info("reconfiguration %s -> %s: %s", short_form(old), short_form(new), ", ".join(
        f"{name} {b - a:.2f} s" for (_, a), (name, b) in zip(marks, marks[1:])))
    return Switched(steps, apply, moved)


class Checkpoints:
    """The checkpoint baseline, as existing systems switch: checkpoint, restart every node, rebuild, restore.

    Its checkpoints live in one temporary folder, removed by :meth:`close`.
    """

    def __init__(self, reset_container: Callable[[], None]):
        self.reset_container = reset_container  # drops the job's state on nodes that cannot be restarted
        self.folder: str | None = None

    def switch(self, engine: Engine, new: dict[str, Any], context: SwitchContext) -> Switched:
        if self.folder is None:
            self.folder = tempfile.mkdtemp(prefix="tfonline-checkpoint-")
        folder = tempfile.mkdtemp(dir=self.folder)  # this switch's checkpoint, and nothing else
        chief = engine.graphs[0]
        with chief.graph.as_default():  # the driver runs eagerly elsewhere; a Saver must see its graph
            path = chief.saver.save(engine.sessions[0], os.path.join(folder, "model"), write_meta_graph=False)
        moved = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
        engine.close_sessions()
        engine.advance_input(context.batches_read())
        cluster, used = engine.cluster, engine.nodes_of(new)
        threads = {node: threads_of(new) if node in used else cluster.node_threads(node) for node in cluster.pool}
        if isinstance(cluster, LocalCluster):
            cluster.restart_nodes(threads)
        else:  # nodes started elsewhere restart only for new pools: drop the job's state on them instead
            self.reset_container()
            cluster.set_threads_of({node: threads[node] for node in used})
        engine.forget_graphs()  # built anew, as a restarted job would
        steps, apply = engine.open(new, balanced_placement(engine.partitions_for(new["ps"]), new["ps"]))
        with engine.graphs[0].graph.as_default():
            engine.graphs[0].saver.restore(engine.sessions[0], path)
        shutil.rmtree(folder, ignore_errors=True)
        return Switched(steps, apply, moved)

    def close(self) -> None:
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None
