"""A trained model back from its checkpoint, on one device: what :meth:`MLJobFramework.restore` returns."""

from __future__ import annotations

import os
from typing import Any

import tensorflow as tf

from tfonline import _evaluation, checkpoint as checkpoints
from tfonline._graph import check_dataset
from tfonline.exceptions import ConfigurationError, JobDefinitionError


class TrainedModel:
    """The job's model built on this process's CPU, its variables restored by a ``tf.compat.v1.train.Saver``.

    The graph is ``metrics_fn`` (or ``model_fn``'s loss) on a reinitialisable
    iterator of the job's data: :meth:`evaluate` runs it over
    ``eval_input_fn``'s data or any other of the same structure.
    :attr:`session`, :attr:`graph` and :attr:`variables` (name ->
    variable) are there to run anything else on the model; the graph is
    not finalised, so ops can be added.

    Use it as a context manager, or call :meth:`close`.
    """

    def __init__(self, job, checkpoint: Any):
        self.checkpoint = checkpoints.resolve(checkpoint)
        self.job = job
        self.graph = tf.Graph()
        with self.graph.as_default(), tf.device("/cpu:0"):
            example = _evaluation.eval_dataset(job) if _evaluation.evaluates(job) else check_dataset(
                job.input_fn(0, 1), "input_fn")
            spec = example.element_spec
            self._iterator = tf.compat.v1.data.Iterator.from_structure(
                tf.nest.map_structure(lambda s: s.dtype, spec), tf.nest.map_structure(lambda s: s.shape, spec))
            features, labels = self._iterator.get_next()
            with tf.compat.v1.variable_scope(tf.compat.v1.get_variable_scope(), use_resource=True):
                self._ops = _evaluation.eval_ops(_evaluation.metric_function(job)(features, labels), labels)
            self.variables = {v.op.name: v for v in tf.compat.v1.global_variables()}
            saver = tf.compat.v1.train.Saver(self.variables)
        self.session = tf.compat.v1.Session(graph=self.graph)
        reader = tf.train.load_checkpoint(self.checkpoint)
        held = reader.get_variable_to_shape_map()
        missing = sorted(set(self.variables) - set(held))
        if missing:
            self.session.close()
            raise ConfigurationError(
                f"checkpoint must hold the model's variables, got {self.checkpoint!r} without "
                f"{', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}")
        with self.graph.as_default():  # outside its graph, a Saver restores eagerly
            saver.restore(self.session, self.checkpoint)
        self.step = int(reader.get_tensor(checkpoints.GLOBAL_STEP)) if checkpoints.GLOBAL_STEP in held else None

    def evaluate(self, input_fn=None) -> dict[str, float]:
        """Each metric's mean over the dataset ``input_fn()`` returns (default: ``eval_input_fn``), its
        batches weighted by their examples. ``input_fn`` is called in the model's graph: a dataset
        built outside it cannot feed it."""
        if input_fn is None:
            if not _evaluation.evaluates(self.job):
                raise ConfigurationError(
                    f"evaluate needs data: {self.job.name} has no eval_input_fn, and no input_fn was given")
            input_fn = self.job.eval_input_fn
        elif not callable(input_fn):
            raise ConfigurationError(
                f"input_fn must be a function returning a tf.data.Dataset, got {type(input_fn).__name__}")
        with self.graph.as_default(), tf.device("/cpu:0"):
            dataset = check_dataset(input_fn(), "input_fn")
            try:
                initializer = self._iterator.make_initializer(dataset)
            except (TypeError, ValueError) as e:
                raise JobDefinitionError(
                    f"input_fn must yield what the model was built on, got another structure: {e}") from e
        return _evaluation.evaluate(self.session, initializer, self._ops)

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> TrainedModel:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"TrainedModel({self.job.name}, {os.path.basename(self.checkpoint)}, {len(self.variables)} variables)"
