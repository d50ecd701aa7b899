"""What a job keeps of its model: checkpoints read from the cluster, and its metrics measured there."""

from __future__ import annotations

import logging
import time

import tensorflow as tf

from tfonline import _evaluation
from tfonline._calls import node_of
from tfonline._graph import node_device
from tfonline.checkpoint import CheckpointWriter

logger = logging.getLogger("tfonline")


class Keeper:
    """Writes ``engine``'s parameters as checkpoints into ``model_dir`` and evaluates them on the cluster.

    Each write and evaluation is recorded (``recorder``) with its cost.
    """

    def __init__(self, job, engine, recorder, model_dir: str, *, seed: int, keep: int | None = None):
        self.job, self.engine, self.recorder, self.seed = job, engine, recorder, seed
        self.writer = CheckpointWriter(model_dir, keep)
        self.latest: str | None = None
        self.metrics: dict[str, float] | None = None
        self._eval_graphs: dict[tuple, tuple] = {}

    def save(self, step: int, kind: str) -> str:
        """Reads every variable from the ps nodes (the chief worker's session) and writes them."""
        started = time.monotonic()
        chief, session = self.engine.graphs[0], self.engine.sessions[0]
        if chief.ensure_op is not None:  # a switch's transition graph: moved variables exist once it ran
            session.run(chief.ensure_op)
        path = self.writer.write(session.run(chief.variables), step)
        self.latest = path
        self.recorder.checkpoint(step=step, path=path, kind=kind, cost_s=time.monotonic() - started)
        return path

    def evaluate(self, step: int) -> dict[str, float] | None:
        """The job's metrics on ``eval_input_fn``'s data, computed on the chief worker's node from the
        parameters where they live; None for a job without ``eval_input_fn``."""
        if not _evaluation.evaluates(self.job):
            return None
        started = time.monotonic()
        chief = self.engine.graphs[0]
        graph, initializer, ops = self._eval_graph(chief)
        nodes = set(self.engine.layout.ps_nodes) | {chief.worker_node}
        nodes |= {node_of(variable.device) for variable in chief.variables.values()}
        config = tf.compat.v1.ConfigProto(device_filters=[f"/job:node/task:{n}" for n in sorted(nodes)])
        with tf.compat.v1.Session(self.engine.cluster.target(chief.worker_node), graph=graph, config=config) as s:
            self.metrics = _evaluation.evaluate(s, initializer, ops)
        self.recorder.evaluation(step=step, metrics=self.metrics, cost_s=time.monotonic() - started)
        return self.metrics

    def _eval_graph(self, chief) -> tuple:
        devices = {name: variable.device for name, variable in chief.variables.items()}
        key = (chief.worker_node, tuple(sorted(devices.items())))
        if key not in self._eval_graphs:
            rule = self.engine.rule_for(len(self.engine.layout.ps_nodes))
            self._eval_graphs[key] = _evaluation.cluster_eval_graph(
                self.job, node_device(chief.worker_node), rule, devices, self.engine.container, self.seed)
        return self._eval_graphs[key]

    def close(self) -> None:
        self.writer.close()
