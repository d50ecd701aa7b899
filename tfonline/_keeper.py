"""What a job keeps of its model: checkpoints read from the cluster, and its metrics measured there."""

from __future__ import annotations

import logging
import time

import numpy as np
import tensorflow as tf

from tfonline import _evaluation
from tfonline._calls import node_of
from tfonline._graph import GLOBAL_STEP_NAME, node_device
from tfonline.checkpoint import CheckpointWriter
from tfonline.exceptions import essence

logger = logging.getLogger("tfonline")

# A synchronous job's checkpoint waits this long for the step under way to end (else it is tried a period later),
# looking every GATE_LOOK_S for a dead node. A step on a node that died may not end for seconds (its surviving
# workers' steps are waited for), and the job's loop, which the checkpoint holds up, is what sees to the lost
# node: a worker killed while a checkpoint waited was taken out of the job 10 s late.
GATE_WAIT_S = 10.0
GATE_LOOK_S = 0.2


class Keeper:
    """Writes ``engine``'s parameters as checkpoints into ``model_dir`` and evaluates them on the cluster.

    Besides the final checkpoint, one is written every ``every_s`` seconds
    of training (None: none), and the latest ``keep`` are kept. Each write
    and evaluation is recorded (``recorder``) with its cost, and each
    checkpoint with what a resumed job needs of the training state.
    ``started`` is the job's start (``time.monotonic``), less the time it
    trained before it was resumed.
    """

    def __init__(self, job, engine, state, recorder, model_dir: str, *, seed: int, started: float,
                 every_s: float | None = None, keep: int | None = None, resumed: bool = False):
        self.job, self.engine, self.state, self.recorder, self.seed = job, engine, state, recorder, seed
        self.started, self.every_s = started, every_s
        self.writer = CheckpointWriter(model_dir, keep, adopt=resumed)
        self.latest: str | None = None
        self.latest_saved: dict | None = None  # the training state at the latest checkpoint (TrainingState.saved)
        self.metrics: dict[str, float] | None = None
        self._eval_graphs: dict[tuple, tuple] = {}
        self._next = time.monotonic() + every_s if every_s is not None else None

    def due(self) -> bool:
        """Whether a periodic checkpoint is due."""
        return self._next is not None and time.monotonic() >= self._next

    def save(self, kind: str) -> str:
        """Reads every variable from the ps nodes (through the chief worker's session) and writes them, while
        the workers train on: an asynchronous job's checkpoint is as consistent as its training (each
        variable as one read of it found it), its step the one reached when the read began. A synchronous
        job's is read between two of its steps: exactly the parameters of the step it records."""
        started = time.monotonic()
        gate = self.state.step_gate if self.state.sync else None
        if gate is not None:
            self._between_steps(gate)
        try:  # a synchronous job's between two steps: its parameters are exactly those of the step it records
            saved = self.state.saved()
            saved["input_position"] = self.engine.input_position + saved.pop("read")
            saved["elapsed_s"] = started - self.started
            chief, session = self.engine.graphs[0], self.engine.sessions[0]
            if chief.ensure_op is not None:  # a switch's transition graph: moved variables exist once it ran
                session.run(chief.ensure_op)
            values = session.run(chief.variables)
        finally:
            if gate is not None:
                gate.release()
        # The step the repository counts, which names the file: an asynchronous job's global step also counts
        # the few steps still running when it was read (and those that ran while the read went on).
        values[GLOBAL_STEP_NAME] = np.int64(saved["step"])
        path = self.writer.write(values, saved["step"])
        self.latest, self.latest_saved = path, saved
        self.recorder.checkpoint(step=saved["step"], path=path, kind=kind, cost_s=time.monotonic() - started,
                                 saved=saved)
        if self.every_s is not None:
            self._next = time.monotonic() + self.every_s
        return path

    def _between_steps(self, gate) -> None:
        """Takes the synchronous step gate, once the step under way has ended; raises TimeoutError when it does
        not within :data:`GATE_WAIT_S`, and NodeFailedError for a node that died meanwhile (the job's loop sees
        to it once the checkpoint has given up)."""
        deadline = time.monotonic() + GATE_WAIT_S
        while not gate.acquire(timeout=GATE_LOOK_S):
            self.engine.cluster.check_alive()
            if time.monotonic() >= deadline:
                raise TimeoutError(f"the synchronous step under way did not end within {GATE_WAIT_S:g} s")

    def periodic(self) -> None:
        """A periodic checkpoint, and the metrics at it; one that fails is logged and tried again a period
        later: the job trains on."""
        try:
            self.save("periodic")
            self.evaluate()
        except Exception as e:  # noqa: BLE001 (a full disk, a node's error: the next period may do better)
            self._next = time.monotonic() + self.every_s
            logger.warning("a periodic checkpoint or evaluation failed at step %d: %s: %s", self.state.step,
                           type(e).__name__, essence(str(e)))

    def evaluate(self) -> dict[str, float] | None:
        """The job's metrics on ``eval_input_fn``'s data, computed on the chief worker's node from the
        parameters where they live; None for a job without ``eval_input_fn``."""
        if not _evaluation.evaluates(self.job):
            return None
        started, step = time.monotonic(), self.state.step
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
