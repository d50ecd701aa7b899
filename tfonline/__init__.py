"""tfonline: TensorFlow parameter-server training that tunes its own system setting.

Subclass :class:`MLJobFramework`, define ``input_fn``, ``model_fn`` and
``optimizer_fn``, and call ``run()``. Importing this package does not import
TensorFlow; ``run()`` does. tfonline uses the TensorFlow already installed
(2.16 to 2.21) and installs none itself: without one, ``from tfonline import
MLJobFramework`` fails with one line that says how to install one, while
reading a repository (``tfonline report``) needs no TensorFlow.
"""

from __future__ import annotations

from tfonline.exceptions import (
    ClusterError,
    ConfigurationError,
    DatasetExhaustedError,
    JobDefinitionError,
    NodeFailedError,
    RepositoryError,
    TensorFlowRequirementError,
    TfOnlineError,
)
from tfonline._version import __version__
from tfonline.result import RunResult
from tfonline.sweep import sweep

__all__ = [
    "ClusterError",
    "ConfigurationError",
    "DatasetExhaustedError",
    "JobDefinitionError",
    "MLJobFramework",
    "NodeFailedError",
    "RepositoryError",
    "RunResult",
    "TensorFlowRequirementError",
    "TfOnlineError",
    "__version__",
    "sweep",
]


def __getattr__(name: str):
    """``MLJobFramework`` on first use, once a TensorFlow is known to be installed (a training script's import)."""
    if name == "MLJobFramework":
        from tfonline._tensorflow import check_installed

        check_installed()
        from tfonline.job import MLJobFramework

        globals()[name] = MLJobFramework
        return MLJobFramework
    raise AttributeError(f"module 'tfonline' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | {"MLJobFramework"})
