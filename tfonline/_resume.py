"""Resuming an interrupted job from its latest checkpoint: ``run(resume=True)``.

The job to resume is the latest run of the job's name in the repository
(in ``model_dir``, when one is given), when it did not end well
(interrupted, its driver gone, or failed) and left a checkpoint whose files
are there. It goes on as the same job: the same id and repository row, the
step, setting, smoothed loss and input position of its checkpoint, and its
tuner's triples (which a tuned job loads anyway).

What it trained after that checkpoint is lost with the driver, so the
repository is rewound to it (:meth:`Repository.rewind`): the rows of later
steps go, the tuner's triples stay (what it measured of each setting still
holds), and a ``resumes`` row records the rewind and the gap.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from tfonline.checkpoint import GLOBAL_STEP
from tfonline.repository import Repository

logger = logging.getLogger("tfonline")

RESUMABLE = ("interrupted", "failed")


@dataclass
class ResumePoint:
    """A job to resume and the checkpoint it goes on from."""

    job_id: str
    started_at: float
    model_dir: str
    checkpoint: str
    saved: dict[str, Any]  # TrainingState.saved at the checkpoint, with input_position and elapsed_s
    setting: dict[str, Any]
    last_step: int  # the last step the interrupted run recorded
    last_wall: float  # and when: the gap runs from there
    next_segment: int  # the first segment number no row of the job uses

    @property
    def step(self) -> int:
        return int(self.saved["step"])


def find(repo: Repository, name: str, model_dir: str | None) -> ResumePoint | None:
    """The job of ``name`` to resume, or None (then the run starts afresh, and says why in the log)."""
    jobs = [job for job in repo.jobs(name) if job["name"] == name
            and (model_dir is None or job.get("model_dir") == model_dir)]
    if not jobs:
        logger.info("resume=True: no earlier run of %s here; starting afresh", name)
        return None
    job = jobs[-1]
    if job["status"] not in RESUMABLE:
        logger.info("resume=True: the latest run of %s (%s) is %s; starting afresh", name, job["id"], job["status"])
        return None
    for row in repo.rows("select c.step, c.path, c.state, s.knobs from checkpoints c join settings s "
                         "on s.id = c.setting_id where c.job_id = ? order by c.step desc", (job["id"],)):
        if os.path.exists(row["path"] + ".index"):
            break
    else:
        logger.info("resume=True: the latest run of %s (%s) left no checkpoint; starting afresh", name, job["id"])
        return None
    last = next(repo.rows("select step, wall_time as wall from iterations where job_id = ? order by step desc "
                          "limit 1", (job["id"],)), {"step": None, "wall": None})
    numbered = next(repo.rows("select max(n) as n from (select max(segment) as n from segments where job_id = ? "
                              "union all select max(segment) from triples where job_id = ?)", (job["id"],) * 2))
    return ResumePoint(job["id"], job["started_at"], job["model_dir"], row["path"], json.loads(row["state"]),
                       json.loads(row["knobs"]), last["step"] or 0, last["wall"] or job["started_at"],
                       (numbered["n"] or 0) + 1)


def cluster_values(checkpoint: str, driver_step_name: str) -> dict[str, np.ndarray]:
    """The checkpoint's variables under the names a worker graph's restore takes (blocks are cut from them)."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(checkpoint)
    values = {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}
    if GLOBAL_STEP in values:
        values[driver_step_name] = values.pop(GLOBAL_STEP)
    return values
