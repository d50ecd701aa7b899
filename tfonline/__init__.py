"""tfonline: TensorFlow parameter-server training that tunes its own system setting.

Subclass :class:`MLJobFramework`, define ``input_fn``, ``model_fn`` and
``optimizer_fn``, and call ``run()``. Importing this package does not import
TensorFlow; ``run()`` does.
"""

from __future__ import annotations

from tfonline.exceptions import (
    ClusterError,
    ConfigurationError,
    DatasetExhaustedError,
    JobDefinitionError,
    NodeFailedError,
    RepositoryError,
    TfOnlineError,
)
from tfonline.job import MLJobFramework, RunResult
from tfonline.sweep import sweep

__version__ = "0.1.0"

__all__ = [
    "ClusterError",
    "ConfigurationError",
    "DatasetExhaustedError",
    "JobDefinitionError",
    "MLJobFramework",
    "NodeFailedError",
    "RepositoryError",
    "RunResult",
    "TfOnlineError",
    "__version__",
    "sweep",
]
