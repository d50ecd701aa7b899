"""The tuning manager: online Bayesian optimisation of the system setting (the paper's §III).

- :mod:`tfonline.tuner.space`: the knobs, their domains on a cluster, and
  the user's pins, narrowed domains and added knobs.
- :mod:`tfonline.tuner.manager`: the loop (phases, triples, the EI > cost
  gate), independent of how a setting is applied.
- :mod:`tfonline.tuner._gpyopt`: the only module that imports GPyOpt.

:class:`Tuning` holds a job's tuning options; ``run(tune=True)`` makes one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from tfonline.exceptions import ConfigurationError
from tfonline.setting import Knob
from tfonline.tuner.inherit import Inheritance, inherit
from tfonline.tuner.manager import EXPLORATION_BUDGET, OVERHEAD_SHARE, Triple, TuningManager, check_options
from tfonline.tuner.space import KnobSpace

__all__ = ["Tuning", "Inheritance", "KnobSpace", "TuningManager", "Triple", "check_options", "inherit", "load_triples"]


@dataclass
class Tuning:
    """A job's tuning options (see ``MLJobFramework.run``)."""

    restrict: dict[str, Any] | None = None
    extra_knobs: Sequence[Knob] = ()
    initial_iterations: int = 50
    random_settings: int = 10
    segment_iterations: int | None = None
    min_segment_s: float = 2.0
    exploration_budget: float | None = EXPLORATION_BUDGET
    overhead_share: float | None = OVERHEAD_SHARE
    estimator_factory: Any = None
    resume: bool = True
    speed_prior: bool = False  # the speed model as the GP's first guess (tfonline.tuner.speed.SpeedPrior)
    schedule: Sequence[tuple[int, dict[str, Any]]] | None = None  # run(schedule=...): switches, not tuning

    def __post_init__(self):
        check_options(self.initial_iterations, self.random_settings, self.segment_iterations, self.min_segment_s,
                      self.exploration_budget, self.overhead_share)
        if not isinstance(self.speed_prior, bool):
            raise ConfigurationError(f"speed_prior must be True or False, got {self.speed_prior!r}")

    def space(self, node_count: int, fixed_threads=None, cores: int | None = None) -> KnobSpace:
        """The knob space of a job on ``node_count`` nodes whose thread pools are at most ``cores`` each
        (default: this host's), or fixed at ``fixed_threads``."""
        import os

        restrict = dict(self.restrict or {})
        if fixed_threads is not None:  # nodes tfonline cannot restart keep their pools
            restrict.setdefault("intra_op_parallelism_threads", fixed_threads.intra_op_parallelism_threads)
            restrict.setdefault("inter_op_parallelism_threads", fixed_threads.inter_op_parallelism_threads)
        return KnobSpace(node_count, cores or os.cpu_count() or 1, restrict, tuple(self.extra_knobs))

    def inherit(self, space: KnobSpace, job, repo, job_id: str | None = None, signature=None) -> Inheritance:
        """What the job's tuner starts from (``resume``: see :mod:`tfonline.tuner.inherit`); nothing without."""
        return inherit(repo, job_id, job.name, signature, space) if self.resume else Inheritance()

    def manager(self, space: KnobSpace, start: dict[str, Any], job, repo, seed: int,
                technique: str = "online", job_id: str | None = None, signature=None,
                inheritance: Inheritance | None = None) -> TuningManager:
        """The job's tuning manager, started from ``inheritance`` (made by :meth:`inherit` when None);
        its ``inheritance`` says from which jobs."""
        if inheritance is None:
            inheritance = self.inherit(space, job, repo, job_id, signature)
        manager = TuningManager(
            space, start, float(job.target_loss), self.estimator_factory,
            initial_iterations=self.initial_iterations, random_settings=self.random_settings,
            segment_iterations=self.segment_iterations, min_segment_s=self.min_segment_s, seed=seed,
            history=inheritance.triples, exploration_budget=self.exploration_budget, technique=technique,
            overhead_share=self.overhead_share, speed_prior=self.speed_prior, gp_fit=inheritance.gp_fit)
        manager.inheritance = inheritance
        return manager


def load_triples(repo, job_name: str, space: KnobSpace) -> list[Triple]:
    """The usable triples that earlier runs of ``job_name`` left in the repository, within ``space``, by name
    alone (no signature): what :func:`tfonline.tuner.inherit.inherit` gives a job without one."""
    return inherit(repo, None, job_name, None, space).triples
