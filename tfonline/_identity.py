"""What makes a job the same job again: its class, as :func:`tfonline.sweep.load_class` finds it, and the
attributes set on its object. Recorded with every job (``jobs.job_class``, ``jobs.attributes``); a replay
makes the job again from them, and a tuner inherits convergence speeds only from the same job."""

from __future__ import annotations

import inspect
import json
import os
from typing import Any

FILE_MODULE_PREFIX = "tfonline_jobs_"  # the modules load_class makes of job files


def class_spec(job_class) -> str:
    """How :func:`tfonline.sweep.load_class` finds ``job_class`` again: ``module:Class``, or
    ``path/to/file.py:Class`` for a class defined in a script (``__main__``) or in a file that function loaded."""
    module = job_class.__module__
    if module == "__main__" or module.startswith(FILE_MODULE_PREFIX):
        try:
            return f"{os.path.abspath(inspect.getfile(job_class))}:{job_class.__qualname__}"
        except (TypeError, OSError):
            pass
    return f"{module}:{job_class.__qualname__}"


def own_attributes(job) -> dict[str, Any]:
    """The attributes set on the job object itself (a sweep's grid, ``__init__``'s), those JSON can keep."""
    kept = {}
    for name, value in vars(job).items():
        if name.startswith("_"):
            continue
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            continue
        kept[name] = value
    return kept
