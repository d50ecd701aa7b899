"""What a run returns, and the stopping rules' constants: shared by the job's API and the driver."""

from __future__ import annotations

from dataclasses import dataclass, field

# The loss stopped improving: no new best smoothed loss, better by this fraction, for `patience` iterations.
DEFAULT_PATIENCE = 5000
PATIENCE_MIN_IMPROVEMENT = 1e-3


@dataclass
class RunResult:
    """What :meth:`MLJobFramework.run` returns."""

    job_id: str
    status: str  # converged | stopped | failed | interrupted | data_exhausted
    stop_reason: str
    iterations: int
    completion_time_s: float
    time_to_first_iteration_s: float | None
    final_loss: float | None
    db: str
    checkpoint: str | None = None  # the checkpoint written at the job's end (see tfonline.checkpoint)
    metrics: dict[str, float] = field(default_factory=dict)  # on eval_input_fn's data at the end, if defined
