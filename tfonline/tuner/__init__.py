"""The tuning manager: online Bayesian optimisation of the system setting (the paper's §III).

- :mod:`tfonline.tuner.space`: the knobs, their domains on a cluster, and
  the user's pins, narrowed domains and added knobs.
- :mod:`tfonline.tuner.manager`: the loop (phases, triples, the EI > cost
  gate), independent of how a setting is applied.
- :mod:`tfonline.tuner._gpyopt`: the only module that imports GPyOpt.

:class:`Tuning` holds a job's tuning options; ``run(tune=True)`` makes one.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Sequence

from tfonline.setting import Knob
from tfonline.tuner.convergence import slope_from_columns
from tfonline.tuner.manager import EXPLORATION_BUDGET, OVERHEAD_SHARE, Triple, TuningManager, check_options
from tfonline.tuner.space import KnobSpace

__all__ = ["Tuning", "KnobSpace", "TuningManager", "Triple", "check_options", "load_triples"]


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
    schedule: Sequence[tuple[int, dict[str, Any]]] | None = None  # run(schedule=...): switches, not tuning

    def __post_init__(self):
        check_options(self.initial_iterations, self.random_settings, self.segment_iterations, self.min_segment_s,
                      self.exploration_budget, self.overhead_share)

    def space(self, node_count: int, fixed_threads=None) -> KnobSpace:
        import os

        restrict = dict(self.restrict or {})
        if fixed_threads is not None:  # nodes tfonline cannot restart keep their pools
            restrict.setdefault("intra_op_parallelism_threads", fixed_threads.intra_op_parallelism_threads)
            restrict.setdefault("inter_op_parallelism_threads", fixed_threads.inter_op_parallelism_threads)
        return KnobSpace(node_count, os.cpu_count() or 1, restrict, tuple(self.extra_knobs))

    def manager(self, space: KnobSpace, start: dict[str, Any], job, repo, seed: int,
                technique: str = "online") -> TuningManager:
        history = load_triples(repo, job.name, space) if self.resume else []
        return TuningManager(
            space, start, float(job.target_loss), self.estimator_factory,
            initial_iterations=self.initial_iterations, random_settings=self.random_settings,
            segment_iterations=self.segment_iterations, min_segment_s=self.min_segment_s, seed=seed,
            history=history, exploration_budget=self.exploration_budget, technique=technique,
            overhead_share=self.overhead_share)


def load_triples(repo, job_name: str, space: KnobSpace) -> list[Triple]:
    """The usable triples that earlier runs of ``job_name`` left in the repository, within ``space``.

    This is how a job restarted on the same repository resumes tuning: its
    GP starts from what the earlier runs learnt, and its convergence speeds
    from their segments' slopes (none for triples written before schema v5).
    """
    rows = repo.rows(
        "select t.loss_before, t.per_iteration_s, t.remaining_iterations, t.remaining_s, t.slope_loss, t.slope, "
        "t.slope_se, s.knobs "
        "from triples t join jobs j on j.id = t.job_id join settings s on s.id = t.setting_id "
        "where j.name = ? and t.remaining_s is not null order by j.started_at, t.segment", (job_name,))
    triples = []
    for row in rows:
        setting = json.loads(row["knobs"])
        if not space.contains(setting) or not math.isfinite(row["loss_before"]):
            continue
        triples.append(Triple(setting, row["loss_before"], row["per_iteration_s"], row["remaining_iterations"],
                              row["remaining_s"], slope=slope_from_columns(row)))
    return triples
