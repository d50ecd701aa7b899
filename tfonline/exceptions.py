"""The one exception hierarchy of tfonline.

Every error a user can see derives from :class:`TfOnlineError`; errors in
what the user passed in also derive from :class:`ValueError` (or
:class:`TypeError`), so ordinary ``except ValueError`` code keeps working.
Messages name what was expected and what was got.
"""

from __future__ import annotations


class TfOnlineError(Exception):
    """Base class of every tfonline error."""


class ConfigurationError(TfOnlineError, ValueError):
    """A job, setting, knob or option given by the user is invalid."""


class JobDefinitionError(TfOnlineError, TypeError):
    """The user's ``MLJobFramework`` subclass is incomplete or returns the wrong thing."""


class RepositoryError(TfOnlineError):
    """The SQLite repository cannot be opened, written or read."""


class ClusterError(TfOnlineError):
    """A node process could not be started, or stopped answering."""


class NodeFailedError(ClusterError):
    """A node process died or hung while a job was running on it (``node_index`` None: the fork server)."""

    def __init__(self, message: str, node_index: int | None):
        super().__init__(message)
        self.node_index = node_index


class TensorFlowRequirementError(TfOnlineError, ImportError):
    """No TensorFlow is installed, or one older than tfonline supports (an ``ImportError`` too)."""


class DatasetExhaustedError(TfOnlineError):
    """A worker's input ended before the job converged."""


def essence(message: str) -> str:
    """The line of a TensorFlow error message that says what went wrong, on one line.

    A line that ends with a colon only introduces the next (a fixed job once failed with no more than
    ``CANCELLED: From /job:node/replica:0/task:3:``): the next informative line is joined to it.
    """
    noise = ("Graph execution error", "Detected at node", "File ", "Original stack", "Node:", "From /job", "[[", "=")
    lines = [ln.strip() for ln in message.splitlines() if ln.strip() and not ln.strip().startswith(noise)]
    if not lines:
        return message.strip()
    said = lines[0]
    for line in lines[1:]:
        if not said.endswith(":"):
            break
        said += " " + line
    return said
