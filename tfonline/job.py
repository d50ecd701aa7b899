"""``MLJobFramework``: what a user subclasses to run a job with tfonline."""

from __future__ import annotations

import math
import os

from typing import Any, Sequence

from tfonline.exceptions import ConfigurationError, JobDefinitionError
from tfonline.result import DEFAULT_PATIENCE, PATIENCE_MIN_IMPROVEMENT, RunResult  # noqa: F401 (documented here)

REQUIRED_METHODS = {
    "input_fn": "input_fn(self, shard, num_shards)",
    "model_fn": "model_fn(self, features, labels)",
    "optimizer_fn": "optimizer_fn(self)",
}
MODES = ("async", "sync")
DEFAULT_CHECKPOINT_EVERY_S = 300.0  # a checkpoint every 5 minutes of training
DEFAULT_KEEP_CHECKPOINTS = 3
class _FromClass:
    def __repr__(self) -> str:
        return "the class attribute"


_FROM_CLASS = _FromClass()  # run(patience=...) not given: the class attribute holds


class MLJobFramework:
    """Base class of a training job run by tfonline.

    Subclasses define three methods, all in ordinary ``tf.compat.v1`` graph
    code:

    - ``input_fn(shard, num_shards)`` returns a ``tf.data.Dataset`` of
      ``(features, labels)`` batches: this worker's shard of the data. It
      runs on the worker's node, so it must be built from TensorFlow ops
      (files, tensors, ``tf.random``), not from Python generators. After a
      switch each worker skips its share of the batches the job has read;
      tf.data makes every batch it skips, so an ``input_fn`` whose batches
      cost time to make (augmentation, parsing) may take a third parameter,
      ``skip`` (None, or a scalar int64 tensor: how many of its batches to
      skip), and skip before that work: ``input_fn(shard, num_shards,
      skip=None)``. tfonline then skips nothing itself.
    - ``model_fn(features, labels)`` builds the model and returns a scalar
      float loss tensor. Variables may be created with
      ``tf.compat.v1.get_variable`` (large ones are then partitioned across
      the ps nodes; use ``tf.nn.embedding_lookup`` for sparse reads) or with
      ``tf.Variable``.
    - ``optimizer_fn()`` returns a ``tf.compat.v1.train.Optimizer``.

    Two more are optional, for measuring the model on held-out data:

    - ``eval_input_fn()`` returns a finite ``tf.data.Dataset`` of
      ``(features, labels)`` batches;
    - ``metrics_fn(features, labels)`` returns a dict of scalar metric
      tensors per batch, built from the variables ``model_fn`` creates (a
      helper both call). Each metric is averaged over the data, batches
      weighted by their examples. Without it, the metric is the
      ``model_fn`` loss.

    With ``eval_input_fn``, a job's metrics are computed at its end on a
    node, from the parameters where they live, recorded in the repository
    and returned in :attr:`RunResult.metrics`. Every job ends by writing a
    TensorFlow checkpoint (:mod:`tfonline.checkpoint` says what it holds);
    :meth:`restore` builds the model from it on one device.

    Class attributes set the stopping rule: ``target_loss`` (required),
    ``max_steps``, ``max_seconds``, ``smoothing_window`` (the span, in
    iterations, of the exponential moving average the target is compared
    with) and ``patience``: the job also stops, with status "stopped", when
    the smoothed loss has not improved on its best by at least
    :data:`PATIENCE_MIN_IMPROVEMENT` (relative) for ``patience`` iterations,
    the paper's second convergence rule, so that a job whose loss plateaus
    above its target ends and says so. None turns that rule off.
    """

    target_loss: float | None = None
    max_steps: int | None = None
    max_seconds: float | None = None
    smoothing_window: int = 20
    patience: int | None = DEFAULT_PATIENCE

    @property
    def name(self) -> str:
        return type(self).__name__

    def input_fn(self, shard: int, num_shards: int):
        raise NotImplementedError

    def model_fn(self, features, labels):
        raise NotImplementedError

    def optimizer_fn(self):
        raise NotImplementedError

    def eval_input_fn(self):
        raise NotImplementedError

    def metrics_fn(self, features, labels):
        raise NotImplementedError

    eval_input_fn.optional = metrics_fn.optional = True  # a subclass's own have no such mark

    def restore(self, checkpoint):
        """The model from ``checkpoint`` (a checkpoint path, a directory's latest, or a
        :class:`RunResult`), built on this process's CPU: a :class:`tfonline.trained.TrainedModel`,
        whose ``evaluate()`` gives the metrics on ``eval_input_fn``'s data or any dataset.

        Raises:
            ConfigurationError: ``checkpoint`` names no checkpoint, or one without this model's variables.
            TensorFlowRequirementError: no TensorFlow is installed, or too old a one.
        """
        from tfonline._tensorflow import require

        require()
        from tfonline.trained import TrainedModel

        return TrainedModel(self, checkpoint)

    def run(
        self,
        setting: dict[str, Any] | None = None,
        *,
        tune: bool = False,
        db: str | os.PathLike = "tfonline.db",
        mode: str = "async",
        cluster: Any = None,
        nodes: int | None = None,
        seed: int = 0,
        max_steps: int | None = None,
        max_seconds: float | None = None,
        patience: Any = _FROM_CLASS,
        quiet: bool = False,
        estimator: str = "hogwild",
        estimator_options: dict[str, Any] | None = None,
        space: dict[str, Any] | None = None,
        extra_knobs: Sequence[Any] = (),
        tuning: dict[str, Any] | None = None,
        reconfig: str = "online",
        schedule: Sequence[tuple[int, dict[str, Any]]] | None = None,
        backend: Any = None,
        model_dir: str | os.PathLike | None = None,
        checkpoint_every_s: float | None = DEFAULT_CHECKPOINT_EVERY_S,
        keep_checkpoints: int | None = DEFAULT_KEEP_CHECKPOINTS,
        resume: bool = False,
        tensorboard: str | os.PathLike | None = None,
    ) -> RunResult:
        """Runs the job on a TensorFlow cluster until it converges.

        Args:
            setting: knob values (see :mod:`tfonline.setting`); unset knobs
                take TensorFlow's defaults, with one ps node.
            tune: learn and switch to better settings while training.
            db: the SQLite repository every iteration is logged to.
            mode: ``"async"`` (Hogwild-style: each worker pushes its own
                update) or ``"sync"`` (one update from all workers' gradients).
            cluster: None for an embedded local cluster, a list of
                ``host:port`` node addresses, ``"TF_CONFIG"`` (the addresses of
                the ``TF_CONFIG`` environment variable, :mod:`tfonline.tf_config`),
                or a :class:`tfonline.cluster.Cluster`. Of given addresses, at
                least two must serve; the job starts on those that do, and
                each of the others joins it once it serves.
            nodes: how many nodes the embedded cluster starts.
            seed: the graph-level random seed. At one seed a job starts
                from the same weights under every setting: each
                ``get_variable`` variable drawn at random without a seed of
                its own is seeded by its name, and a cut variable's blocks
                are rows of the whole one's value (:mod:`tfonline._initial`).
            max_steps, max_seconds, patience: override the class attributes
                (``patience=None`` never stops for a plateau).
            quiet: no progress lines.
            estimator: the registered name of the progress estimator
                (see :func:`tfonline.estimator.available_estimators`).
            estimator_options: keyword arguments for that estimator.
            space: with ``tune``, knob name to a value (pinned) or a list of
                values (the only ones tried).
            extra_knobs: with ``tune``, :class:`tfonline.setting.Knob`
                objects to tune as well (type II, with an ``apply``).
            tuning: with ``tune``, the loop's options: ``initial_iterations``
                (I0, default 50), ``random_settings`` (N, default 10),
                ``segment_iterations`` (I, default 3 × workers),
                ``min_segment_s`` (default 2.0; a random setting's
                segment lasts until it is timed instead), ``exploration_budget``
                (default 0.08: random settings and exploring switches spend
                at most this fraction of the job's estimated length; None:
                no limit, the paper's random phase), ``overhead_share``
                (default 0.02: the tuner's decisions take at most this
                share of the job's time; a decision refits the GP only when
                the share pays for it, and a segment lasts until the
                tuner's time so far is within it; None: no such bound,
                every decision refits), ``resume`` (default
                True: start from the triples that earlier jobs in ``db``
                with a similar workload left, see
                :mod:`tfonline.tuner.inherit`) and ``speed_prior``
                (default False: the speed model as the GP's first guess,
                see :mod:`tfonline.tuner.speed`).
            reconfig: how a switch is made (see :mod:`tfonline.reconfig`):
                ``"online"`` (the cheapest technique built for the change)
                ``"restart"`` (always read, rebuild and restore) or
                ``"checkpoint"`` (save, restart every node, restore: the
                baseline).
            schedule: instead of tuning, switch at given steps:
                ``[(step, {knob: value, ...}), ...]``, steps increasing, each
                entry's changes on top of the setting before it. A switch
                comes at the first segment end at or after its step (a few
                steps late at most). For reproducing a sequence of
                switches; not with ``tune``.
            backend: advanced: makes the job's switch backend,
                ``backend(engine, technique, reset_container)`` returning a
                :class:`tfonline.reconfig.Reconfig`; by default
                :class:`tfonline.reconfig.tensorflow.TensorFlowReconfig`.
                Tools and tests that watch or change how switches are
                made subclass it.
            model_dir: where the job's checkpoints are written; by default
                beside ``db``: ``runs.db`` -> ``runs.models/<job id>/``.
            checkpoint_every_s: seconds of training between checkpoints
                written while it trains (None: only the final one). The
                workers train on while one is read and written.
            keep_checkpoints: how many of the latest checkpoints stay on
                disk (None: all).
            resume: go on with the latest run of this job in ``db`` (in
                ``model_dir``, if given) when it was interrupted or failed:
                the same job, from its latest checkpoint's step, setting and
                input position, with its tuner's knowledge. What it trained
                after that checkpoint is lost, and its rows go. Without such
                a run the job starts afresh (and says so in the log).
            tensorboard: a log directory: TensorBoard event files of the
                job (loss, smoothed loss, time per iteration, ETA, the
                setting's knobs, each switch and its cost, the metrics)
                are written there live (see :mod:`tfonline.tensorboard`).

        Returns:
            A :class:`RunResult`; the full history is in ``db``.

        Raises:
            JobDefinitionError: a method is missing or returns the wrong thing.
            ConfigurationError: an invalid option, knob or value.
            RepositoryError: ``db`` cannot be used.
            DatasetExhaustedError: a worker's data ended before convergence.
            NodeFailedError: a node process died during the job.
            TensorFlowRequirementError: no TensorFlow is installed, or too old a one.
        """
        self._validate(tune, mode)
        limits = (
            self.max_steps if max_steps is None else max_steps,
            self.max_seconds if max_seconds is None else max_seconds,
            self.patience if patience is _FROM_CLASS else patience,
        )
        _check_limits(*limits)
        from tfonline._runner import Runner

        from tfonline.estimator import get_estimator

        progress = get_estimator(estimator, **(estimator_options or {}))
        plan = _tuning_plan(tune, tuning, space, extra_knobs, schedule, estimator, estimator_options)
        from tfonline.reconfig import check_technique

        check_technique(reconfig)
        _check_keeping(model_dir, checkpoint_every_s, keep_checkpoints, resume)
        if tensorboard is not None:
            if not isinstance(tensorboard, (str, os.PathLike)):
                raise ConfigurationError(
                    f"tensorboard must be a directory path or None, got {type(tensorboard).__name__}")
            from tfonline.tensorboard import check_logdir

            check_logdir(tensorboard)
        return Runner(self, setting, db=db, mode=mode, cluster=cluster, nodes=nodes, seed=seed,
                      max_steps=limits[0], max_seconds=limits[1], patience=limits[2], quiet=quiet,
                      estimator=progress,
                      tuning=plan, reconfig=reconfig, backend=backend, model_dir=model_dir, resume=resume,
                      checkpoint_every_s=checkpoint_every_s, keep_checkpoints=keep_checkpoints,
                      tensorboard=tensorboard).run()

    def _validate(self, tune: bool, mode: str) -> None:
        from tfonline._tensorflow import require

        require()  # before anything else: without it nothing below matters
        for method, signature in REQUIRED_METHODS.items():
            if getattr(type(self), method) is getattr(MLJobFramework, method):
                raise JobDefinitionError(f"{self.name} must define {signature}; it is missing")
        target = self.target_loss
        if isinstance(target, bool) or not isinstance(target, (int, float)) or math.isnan(target) or target <= 0:
            raise ConfigurationError(f"target_loss must be a number > 0, got {target!r}")
        if math.isinf(target):
            raise ConfigurationError(f"target_loss must be finite, got {target!r}")
        window = self.smoothing_window
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ConfigurationError(f"smoothing_window must be an integer >= 1, got {window!r}")
        if mode not in MODES:
            raise ConfigurationError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")


def _tuning_plan(tune, tuning, space, extra_knobs, schedule, estimator, estimator_options):
    """What drives switches: a :class:`tfonline.tuner.Tuning` for ``tune`` or a schedule, or None."""
    from tfonline.estimator import get_estimator

    plan = None
    if tune:
        from tfonline.tuner import Tuning

        if tuning is not None and not isinstance(tuning, dict):
            raise ConfigurationError(f"tuning must be a dict of options, got {type(tuning).__name__}")
        known = {"initial_iterations", "random_settings", "segment_iterations", "min_segment_s",
                 "exploration_budget", "overhead_share", "resume", "speed_prior"}
        unknown = sorted(set(tuning or {}) - known)
        if unknown:
            raise ConfigurationError(
                f"unknown tuning option {unknown[0]!r}; known options: {', '.join(sorted(known))}")
        plan = Tuning(restrict=space, extra_knobs=tuple(extra_knobs), **(tuning or {}),
                      estimator_factory=lambda: get_estimator(estimator, **(estimator_options or {})))
    elif space is not None or extra_knobs or tuning is not None:
        raise ConfigurationError("space, extra_knobs and tuning apply only with tune=True, got tune=False")
    if schedule is not None:
        from tfonline.tuner.schedule import check_schedule
        from tfonline.tuner import Tuning

        if tune:
            raise ConfigurationError("schedule replaces tuning: give schedule or tune=True, got both")
        plan = Tuning(schedule=check_schedule(schedule), min_segment_s=0.0)
    return plan


def _check_keeping(model_dir: Any, every_s: Any, keep: Any, resume: Any) -> None:
    if model_dir is not None and not isinstance(model_dir, (str, os.PathLike)):
        raise ConfigurationError(f"model_dir must be a directory path or None, got {type(model_dir).__name__}")
    if every_s is not None and (isinstance(every_s, bool) or not isinstance(every_s, (int, float))
                                or not every_s > 0 or math.isinf(every_s)):
        raise ConfigurationError(f"checkpoint_every_s must be a number > 0 or None, got {every_s!r}")
    if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int) or keep < 1):
        raise ConfigurationError(f"keep_checkpoints must be an integer >= 1 or None, got {keep!r}")
    if not isinstance(resume, bool):
        raise ConfigurationError(f"resume must be True or False, got {resume!r}")


def _check_limits(max_steps: Any, max_seconds: Any, patience: Any = None) -> None:
    if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1):
        raise ConfigurationError(f"max_steps must be an integer >= 1 or None, got {max_steps!r}")
    if max_seconds is not None and (
        isinstance(max_seconds, bool) or not isinstance(max_seconds, (int, float)) or not max_seconds > 0
    ):
        raise ConfigurationError(f"max_seconds must be a number > 0 or None, got {max_seconds!r}")
    if patience is not None and (isinstance(patience, bool) or not isinstance(patience, int) or patience < 1):
        raise ConfigurationError(f"patience must be an integer >= 1 (iterations) or None, got {patience!r}")
