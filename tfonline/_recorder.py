"""Every row a job writes to its repository: one method per kind of row.

The driver says what happened (a segment ended, a decision was taken, a
switch cost so much); the recorder turns it into the repository's rows.
Column names are spelled here and in :mod:`tfonline.repository` only.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import time
from typing import Any, Callable

from tfonline.repository import Repository
from tfonline.setting import setting_key, short_form
from tfonline.tuner.convergence import slope_columns


class Recorder:
    """Writes one job's rows to ``repo`` (a :class:`~tfonline.repository.Repository`).

    ``clock`` gives the wall time rows record (:func:`time.time`; the
    simulator's clock for a simulated job).
    """

    def __init__(self, repo: Repository, job_id: str, clock: Callable[[], float] = time.time):
        self.repo = repo
        self.job_id = job_id
        self.clock = clock
        self.started = False  # the job's row is written: its end is recorded too

    def job_start(self, *, name: str, script: str, mode: str, target_loss: float, max_steps, max_seconds,
                  started_at: float, node_count: int, knob_space: dict, tf_version: str, seed: int,
                  tuned: bool, job_class: str | None = None, attributes: dict | None = None,
                  replay_of: str | None = None) -> None:
        self.repo.insert("jobs", {
            "id": self.job_id, "name": name, "script": os.path.abspath(script), "mode": mode, "status": "running",
            "target_loss": target_loss, "max_steps": max_steps, "max_seconds": max_seconds,
            "started_at": started_at, "node_count": node_count, "knob_space": json.dumps(knob_space),
            "host": platform.node(), "tf_version": tf_version, "python": platform.python_version(), "seed": seed,
            "tuned": int(tuned), "driver_host": platform.node(), "driver_pid": os.getpid(),
            "heartbeat_at": self.clock(), "job_class": job_class,
            "attributes": None if attributes is None else json.dumps(attributes), "replay_of": replay_of,
        })
        self.repo.flush()
        self.started = True
        self.repo.beat_for(self.job_id)

    def job_resumed(self, point) -> None:
        """The job goes on from ``point`` (a :class:`tfonline._resume.ResumePoint`): its row says it runs again,
        with this driver, and a ``resumes`` row records the rewind."""
        now = self.clock()
        self.repo.update("jobs", self.job_id, {
            "status": "running", "stop_reason": None, "message": None, "finished_at": None,
            "driver_host": platform.node(), "driver_pid": os.getpid(), "heartbeat_at": now})
        self.repo.insert("resumes", {"job_id": self.job_id, "resumed_at": now, "step": point.step,
                                     "checkpoint": point.checkpoint, "lost_steps": point.last_step - point.step,
                                     "gap_s": now - point.last_wall})
        self.repo.flush()
        self.started = True
        self.repo.beat_for(self.job_id)

    def job_end(self, *, status: str, reason: str, started_at: float, iterations: int, final_loss, first_iteration_at,
                tuning_overhead_s) -> None:
        """The job's outcome; never raises (the job's own error, if any, is what the caller reports)."""
        if not self.started:
            return
        finished = self.clock()
        values = {
            "status": status, "stop_reason": reason, "finished_at": finished,
            "completion_time_s": finished - started_at, "iterations": iterations, "final_loss": final_loss,
            "first_iteration_at": first_iteration_at, "tuning_overhead_s": tuning_overhead_s,
        }
        with contextlib.suppress(Exception):
            self.repo.update("jobs", self.job_id, values)
            self.repo.flush()

    def cluster(self, addresses) -> None:
        self.repo.update("jobs", self.job_id, {"cluster": json.dumps(list(addresses))})

    def setting(self, setting: dict[str, Any]) -> None:
        self.repo.insert("settings", {"id": setting_key(setting), "knobs": json.dumps(setting, sort_keys=True),
                                      "short": short_form(setting)}, replace=True)

    def phase(self, phase: str, start_step: int) -> None:
        self.repo.insert("phases", {"job_id": self.job_id, "phase": phase, "start_step": start_step,
                                    "wall_time": self.clock()}, replace=True)

    def segment_start(self, segment: int, setting_id: str, phase: str, start_step: int) -> None:
        self.repo.insert("segments", {"job_id": self.job_id, "segment": segment, "setting_id": setting_id,
                                      "phase": phase, "start_step": start_step, "started_at": self.clock()})

    def segment_end(self, segment: int, end_step: int, start_loss, end_loss) -> None:
        """``end_loss`` is the smoothed loss at the segment's end: what the report shows."""
        self.repo.update("segments", (self.job_id, segment), {
            "end_step": end_step, "start_loss": start_loss, "end_loss": end_loss, "ended_at": self.clock()})

    def segment_phase(self, segment: int, phase: str) -> None:
        self.repo.update("segments", (self.job_id, segment), {"phase": phase})

    def iteration(self, *, step: int, worker: int | None, setting_id: str, segment: int, exec_time_s: float,
                  loss: float, smoothed_loss: float, wall_time: float) -> None:
        self.repo.insert("iterations", {
            "job_id": self.job_id, "step": step, "worker": worker, "setting_id": setting_id, "segment": segment,
            "exec_time_s": exec_time_s, "loss": loss, "smoothed_loss": smoothed_loss, "wall_time": wall_time,
        })

    def estimate(self, *, step: int, estimator: str, loss: float, remaining_iterations, remaining_s,
                 curve_iterations=None, prior_runs: int = 0) -> None:
        self.repo.insert("estimates", {
            "job_id": self.job_id, "step": step, "estimator": estimator, "loss": loss,
            "remaining_iterations": remaining_iterations, "remaining_s": remaining_s,
            "curve_iterations": curve_iterations, "prior_runs": prior_runs, "wall_time": self.clock(),
        }, replace=True)

    def triple(self, triple, segment: int, estimator: str) -> None:
        self.repo.insert("triples", {
            "job_id": self.job_id, "segment": segment, "setting_id": setting_key(triple.setting),
            "loss_before": triple.loss_before, "per_iteration_s": triple.per_iteration_s,
            "remaining_iterations": triple.remaining_iterations, "remaining_s": triple.remaining_s,
            "estimator": estimator, "reason": triple.reason,
            **slope_columns(triple.slope),
        }, replace=True)

    def decision(self, decision, step: int, loss: float) -> None:
        """A tuner's decision (:class:`tfonline.tuner.manager.Decision`), applied or not."""
        self.setting(decision.candidate)
        self.repo.insert("decisions", {
            "job_id": self.job_id, "step": step, "phase": decision.phase,
            "current_setting_id": setting_key(decision.current),
            "candidate_setting_id": setting_key(decision.candidate), "loss": loss,
            "expected_improvement_s": decision.expected_improvement_s,
            "reconfiguration_cost_s": decision.cost_s, "applied": int(decision.switch), "reason": decision.reason,
            "types": "+".join(decision.types), "overhead_s": decision.overhead_s, "wall_time": self.clock(),
        }, replace=True)

    def gp_fit(self, fit, step: int) -> None:
        """The GP's hyperparameters a decision fitted (a :class:`tfonline.tuner._records.GPFit`)."""
        self.repo.insert("gp_fits", {"job_id": self.job_id, "step": step, "form": json.dumps(list(fit.form)),
                                     "hyperparameters": json.dumps(list(fit.values)), "cost_s": fit.cost_s},
                         replace=True)

    def tuning_stopped(self, step: int, setting: dict[str, Any], loss: float, reason: str) -> None:
        """The decision row of a tuner that failed: the job goes on, untuned, on ``setting``."""
        self.repo.insert("decisions", {
            "job_id": self.job_id, "step": step, "phase": "untuned", "current_setting_id": setting_key(setting),
            "candidate_setting_id": setting_key(setting), "loss": loss, "applied": 0, "reason": reason,
            "types": "", "wall_time": self.clock(),
        }, replace=True)

    def reconfiguration(self, *, step: int, old: dict[str, Any], new: dict[str, Any], plan, bytes_moved: int,
                        cost_s: float | None, iterations_during: int | None) -> None:
        """A switch carried out by ``plan`` (:class:`tfonline.reconfig.Plan`), with its measured cost."""
        self.repo.insert("reconfigurations", {
            "job_id": self.job_id, "step": step, "from_setting_id": setting_key(old), "to_setting_id": setting_key(new),
            "types": "+".join(plan.types), "technique": plan.technique, "actions": json.dumps(list(plan.actions)),
            "bytes_moved": bytes_moved, "cost_s": cost_s, "iterations_during": iterations_during,
            "wall_time": self.clock(),
        }, replace=True)

    def node_lost(self, *, step: int, node: int, address: str, role: str, cause: str, action: str) -> None:
        """A node the job lost, and what it did without it (:mod:`tfonline._recovery`)."""
        self.repo.insert("node_losses", {"job_id": self.job_id, "step": step, "node": node, "address": address,
                                         "role": role, "cause": cause, "action": action,
                                         "wall_time": self.clock()}, replace=True)

    def node_joined(self, *, step: int, node: int, address: str) -> None:
        """A node that joined the job mid-job (:meth:`tfonline._recovery.Recovery.joined`)."""
        self.repo.insert("node_joins", {"job_id": self.job_id, "step": step, "node": node, "address": address,
                                        "wall_time": self.clock()}, replace=True)

    def rewind(self, step: int) -> None:
        """The job went back to ``step`` (a lost ps node): what it recorded after is removed
        (:meth:`Repository.rewind`), once every row queued before is committed."""
        self.repo.flush()
        self.repo.rewind(self.job_id, step)

    def model_dir(self, directory: str) -> None:
        self.repo.update("jobs", self.job_id, {"model_dir": directory})

    def inherited(self, inheritance) -> None:
        """The jobs the tuner inherited triples from (a :class:`tfonline.tuner.inherit.Inheritance`), if any."""
        for source in (inheritance.sources if inheritance is not None else ()):
            self.repo.insert("inheritances", {"job_id": self.job_id, "from_job_id": source.job_id,
                                              "name": source.name, "distance": source.distance,
                                              "triples": source.triples,
                                              "gp_fit": int(source.job_id == inheritance.gp_fit_from),
                                              "start": int(source.job_id == inheritance.start_from)}, replace=True)

    def signature(self, signature) -> None:
        """The workload's :class:`tfonline.signature.Signature`."""
        self.repo.update("jobs", self.job_id, {"signature": json.dumps(signature.to_dict())})

    def checkpoint(self, *, step: int, path: str, kind: str, cost_s: float, saved: dict[str, Any]) -> None:
        """A checkpoint written, with the training state it was taken at (``TrainingState.saved``)."""
        self.repo.insert("checkpoints", {"job_id": self.job_id, "step": step, "path": path, "kind": kind,
                                         "cost_s": cost_s, "wall_time": self.clock(),
                                         "setting_id": saved["setting_id"], "state": json.dumps(saved)},
                         replace=True)

    def evaluation(self, *, step: int, metrics: dict[str, float], cost_s: float) -> None:
        at = self.clock()
        for metric, value in metrics.items():
            self.repo.insert("evaluations", {"job_id": self.job_id, "step": step, "metric": metric, "value": value,
                                             "cost_s": cost_s, "wall_time": at}, replace=True)
