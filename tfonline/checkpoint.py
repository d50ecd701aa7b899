"""The trained model in TensorFlow's own checkpoint format, and back.

A job's parameters live on its ps nodes, large variables cut into one
block per node (``w/part_0_of_3``), beside what tfonline adds (its global
step, the sync mode's accumulators). A checkpoint holds what the user's own
``model_fn`` graph on one device would hold:

- every variable under the user's name and full shape, its blocks joined
  (``w``, not ``w/part_0_of_3``);
- the optimizer's slots and other variables under the names a one-device
  graph gives them (``w/Momentum``, ``beta1_power``): a ``Saver`` of a
  graph built with ``model_fn`` and ``optimizer_fn().minimize`` restores
  all of it, one of a graph with ``model_fn`` alone restores the model and
  ignores the rest;
- the job's step as ``global_step`` (int64), what
  ``tf.compat.v1.train.get_or_create_global_step()`` restores: the step
  the repository counts and the file is named after (an asynchronous
  job's parameters may also hold the updates of the few steps that were
  running when they were read);
- not the sync mode's accumulators: they are not model variables (``tfonline._graph``), and zero
  between steps.

Files are TensorFlow's V2 format (``model.ckpt-STEP.index`` and its data),
with the ``checkpoint`` state file beside them, so
``tf.train.latest_checkpoint(directory)`` and ``tf.train.load_checkpoint``
read them. :meth:`tfonline.MLJobFramework.restore` builds the model on one
device from one (:class:`TrainedModel`).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from tfonline.exceptions import ConfigurationError
from tfonline.placement import row_ranges

PREFIX = "model.ckpt"
GLOBAL_STEP = "global_step"
_DRIVER_STEP = "tfonline_global_step"  # tfonline._graph.GLOBAL_STEP_NAME (not imported: that imports TensorFlow)


def default_model_dir(db: str | os.PathLike, job_id: str) -> str:
    """Where a job's checkpoints go unless ``run(model_dir=...)`` says: beside the repository,
    ``runs.db`` -> ``runs.models/<job id>``."""
    stem = os.path.splitext(os.path.abspath(os.fspath(db)))[0]
    return os.path.join(stem + ".models", job_id)


def user_variables(values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The job's variables as the user's one-device graph names them (see the module's docstring).

    ``values`` is what the driver read from the cluster: every global
    variable of a worker graph, by name.
    """
    kept = {name: value for name, value in values.items() if name != _DRIVER_STEP}
    shapes = {name: np.shape(value) for name, value in kept.items()}
    parts: dict[str, list[tuple[int, str]]] = {}
    for name, (key, start, _) in row_ranges(shapes).items():
        parts.setdefault(key, []).append((start, name))
    joined = {}
    for key, members in parts.items():
        ordered = [kept[name] for _, name in sorted(members)]
        joined[key] = ordered[0] if len(ordered) == 1 else np.concatenate(ordered)
    if _DRIVER_STEP in values:
        joined[GLOBAL_STEP] = np.asarray(values[_DRIVER_STEP], dtype=np.int64)
    return joined


class CheckpointWriter:
    """Writes a job's checkpoints into ``directory``, keeping the latest ``keep`` (None: all); with ``adopt``
    (a resumed job), the checkpoints already listed there count among them.

    One small graph in the driver holds a variable per user variable; each
    :meth:`write` assigns the values read from the cluster and saves them.
    The variables' shapes are fixed for the job, so the graph is built at
    the first write and reused.
    """

    def __init__(self, directory: str | os.PathLike, keep: int | None = None, adopt: bool = False):
        if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int) or keep < 1):
            raise ConfigurationError(f"keep must be an integer >= 1 or None, got {keep!r}")
        self.directory, self.keep, self.adopt = os.fspath(directory), keep, adopt
        self._graph = self._session = self._saver = None
        self._feeds: dict[str, Any] = {}
        self._assign = None

    def write(self, values: dict[str, np.ndarray], step: int) -> str:
        """Saves ``values`` (as the cluster names them) as ``model.ckpt-<step>``; returns that path."""
        import tensorflow as tf

        variables = user_variables(values)
        if self._graph is None:
            self._build(tf, variables)
        os.makedirs(self.directory, exist_ok=True)
        self._session.run(self._assign, {self._feeds[name]: value for name, value in variables.items()})
        with self._graph.as_default():  # outside its graph, a Saver saves eagerly
            return self._saver.save(self._session, os.path.join(self.directory, PREFIX), global_step=step,
                                    write_meta_graph=False)

    def _build(self, tf, variables: dict[str, np.ndarray]) -> None:
        graph = tf.Graph()
        with graph.as_default(), tf.device("/cpu:0"):
            saved, assigns = {}, []
            for name, value in variables.items():
                value = np.asarray(value)
                variable = tf.compat.v1.get_variable(name, value.shape, tf.as_dtype(value.dtype), use_resource=True,
                                                     trainable=False, collections=[])
                feed = tf.compat.v1.placeholder(variable.dtype.base_dtype, value.shape)
                assigns.append(variable.assign(feed, read_value=False))
                saved[name], self._feeds[name] = variable, feed
            self._assign = tf.group(*assigns)
            # max_to_keep=None keeps every file, as TensorFlow's Saver documents.
            self._saver = tf.compat.v1.train.Saver(saved, max_to_keep=self.keep, save_relative_paths=True)
        graph.finalize()
        self._graph, self._session = graph, tf.compat.v1.Session(graph=graph)
        state = tf.train.get_checkpoint_state(self.directory) if self.adopt else None
        if state is not None:  # a resumed job's: the interrupted run's checkpoints count towards keep
            self._saver.recover_last_checkpoints(list(state.all_model_checkpoint_paths))

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None


def resolve(checkpoint: Any) -> str:
    """The checkpoint prefix ``checkpoint`` names: a prefix, a directory (its latest checkpoint) or a
    :class:`tfonline.RunResult` (the one its job wrote)."""
    import tensorflow as tf

    given = checkpoint
    if hasattr(checkpoint, "checkpoint") and not isinstance(checkpoint, (str, os.PathLike)):
        checkpoint = checkpoint.checkpoint
        if checkpoint is None:
            raise ConfigurationError(f"checkpoint must name a checkpoint, got a result with none: {given!r}")
    if not isinstance(checkpoint, (str, os.PathLike)):
        raise ConfigurationError(
            f"checkpoint must be a checkpoint path, a directory or a RunResult, got {type(checkpoint).__name__}")
    path = os.fspath(checkpoint)
    if os.path.isdir(path):
        latest = tf.train.latest_checkpoint(path)
        if latest is None:
            raise ConfigurationError(f"checkpoint must be a directory with checkpoints, got {path!r}: it has none")
        return latest
    if not os.path.exists(path + ".index"):
        raise ConfigurationError(f"checkpoint must be an existing checkpoint, got {path!r}: no {path}.index")
    return path
