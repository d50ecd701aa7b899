"""Metrics on held-out data: the graph pieces and the loop the cluster and a restored model share.

A job that defines ``eval_input_fn()`` (a finite ``tf.data.Dataset`` of
``(features, labels)`` batches) is evaluated on it: ``metrics_fn(features,
labels)`` gives a dict of scalar metrics per batch (without one, the
``model_fn`` loss is the metric ``loss``), and each metric is its mean over
the data, each batch weighted by its number of examples (the first
dimension of its labels), so a last, smaller batch counts as much as its
examples. ``metrics_fn`` builds the model again from the same variables
``model_fn`` creates (a helper both call), nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from tfonline._graph import build_model, check_dataset, without_autotune
from tfonline.exceptions import JobDefinitionError

MAX_BATCHES = 1_000_000  # more than this from eval_input_fn: its dataset does not end (a repeat())


def _defines(job, method: str) -> bool:
    """Whether ``job`` defines ``method``: ``MLJobFramework``'s stubs of its optional methods are ``optional``."""
    return not getattr(getattr(job, method), "optional", False)


def evaluates(job) -> bool:
    """Whether ``job`` defines ``eval_input_fn``."""
    return _defines(job, "eval_input_fn")


def eval_dataset(job) -> tf.data.Dataset:
    return without_autotune(check_dataset(job.eval_input_fn(), "eval_input_fn"))  # as the input (_graph)


def metric_function(job):
    """``metrics_fn`` when the job defines it, else the ``model_fn`` loss as the metric ``loss``."""
    if _defines(job, "metrics_fn"):
        return job.metrics_fn
    return lambda features, labels: {"loss": job.model_fn(features, labels)}


@dataclass
class EvalOps:
    """A metrics graph's pieces: per-batch metrics and the batch's example count."""

    metrics: dict[str, tf.Tensor]
    examples: tf.Tensor


def eval_ops(metrics: Any, labels) -> EvalOps:
    """Checks what the metric function returned and pairs it with the batch's example count."""
    if not isinstance(metrics, dict) or not metrics:
        raise JobDefinitionError(
            f"metrics_fn must return a non-empty dict of name -> scalar tensor, got {type(metrics).__name__}")
    for name, tensor in metrics.items():
        if not isinstance(name, str) or not isinstance(tensor, tf.Tensor) or tensor.shape.rank != 0 \
                or not (tensor.dtype.is_floating or tensor.dtype.is_integer):
            got = f"{type(tensor).__name__}" if not isinstance(tensor, tf.Tensor) else f"{tensor.dtype.name} {tensor.shape}"
            raise JobDefinitionError(f"metrics_fn must return scalar numeric tensors, got {name!r}: {got}")
    first = tf.nest.flatten(labels)[0]
    return EvalOps({name: tf.cast(t, tf.float64) for name, t in metrics.items()}, tf.shape(first)[0])


def evaluate(session: tf.compat.v1.Session, initializer: tf.Operation, ops: EvalOps) -> dict[str, float]:
    """Runs ``initializer`` (the data's iterator), then every batch: each metric's example-weighted mean."""
    session.run(initializer)
    totals = dict.fromkeys(ops.metrics, 0.0)
    examples = 0
    for _ in range(MAX_BATCHES):
        try:
            values, count = session.run((ops.metrics, ops.examples))
        except tf.errors.OutOfRangeError:
            break
        for name, value in values.items():
            totals[name] += float(value) * int(count)
        examples += int(count)
    else:
        raise JobDefinitionError(f"eval_input_fn's dataset must end, got more than {MAX_BATCHES:,} batches")
    if examples == 0:
        raise JobDefinitionError("eval_input_fn's dataset must hold at least one example, got none")
    return {name: total / examples for name, total in totals.items()}


def _sharing_creator(devices: dict[str, str]):
    """A variable creator that puts each variable on the device of the training's variable of its name."""

    def sharing_creator(next_creator, **kwargs):
        name = kwargs.get("name") or "Variable"
        if name not in devices:  # a tf.Variable: the name the graph will give it
            name = tf.compat.v1.get_default_graph().unique_name(name, mark_as_used=False)
        if name not in devices:
            raise JobDefinitionError(
                f"metrics_fn must build its model from the variables model_fn creates, got a new one, {name!r}")
        with tf.device(devices[name]):
            return next_creator(**kwargs)

    return sharing_creator


def check_metrics(job, rule, names) -> None:
    """Builds the job's evaluation once, on no device, to check it before any node starts: the data, the
    metrics, and that its variables are among ``names`` (those ``model_fn`` creates under ``rule``)."""
    cardinality = eval_dataset(job).cardinality()
    if tf.executing_eagerly() and int(cardinality) == tf.data.INFINITE_CARDINALITY:
        raise JobDefinitionError("eval_input_fn's dataset must end, got an infinite one (a repeat()?)")
    with tf.Graph().as_default():
        features, labels = tf.compat.v1.data.make_one_shot_iterator(eval_dataset(job)).get_next()
        eval_ops(build_model(job, features, labels, rule, _sharing_creator(dict.fromkeys(names, "")),
                             fn=metric_function(job)), labels)


def cluster_eval_graph(job, node_device: str, rule, devices: dict[str, str], container: str, seed: int | None
                       ) -> tuple[tf.Graph, tf.Operation, EvalOps]:
    """A graph that evaluates the job's parameters where they live, on the node of ``node_device``.

    Its variables are the training's own: each is created with the name,
    cut (``rule``) and device (``devices``: a worker graph's variable name
    -> device) it has in the worker graphs, in the job's ``container``, so
    the ps nodes resolve it to the variable the workers train. Nothing is
    initialised or copied: the metrics read the current values.
    """
    graph = tf.Graph()
    with graph.as_default(), tf.compat.v1.container(container):
        if seed is not None:
            tf.compat.v1.set_random_seed(seed)
        with tf.device(node_device):
            iterator = tf.compat.v1.data.make_initializable_iterator(eval_dataset(job))
            features, labels = iterator.get_next()
            metrics = build_model(job, features, labels, rule, _sharing_creator(devices), fn=metric_function(job))
            ops = eval_ops(metrics, labels)
    graph.finalize()
    return graph, iterator.initializer, ops
