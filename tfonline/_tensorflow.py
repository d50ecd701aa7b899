"""The user's own TensorFlow: found, checked against the supported versions, never installed over.

tfonline does not depend on a TensorFlow package (``tensorflow``,
``tensorflow-cpu`` and the CUDA builds all install the same ``tensorflow``
module, and pip would put a second one over the user's). Whatever trains
calls :func:`require` first; without a usable TensorFlow it fails with one
line that says how to install one. Reading a repository (``tfonline
report``) needs no TensorFlow at all.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import sys
import warnings

from tfonline._version import TENSORFLOW_MIN, TENSORFLOW_REQUIREMENT, TENSORFLOW_TESTED_MAX
from tfonline.exceptions import TensorFlowRequirementError

INSTALL_HINT = (f"pip install 'tfonline[cpu]' (TensorFlow's CPU build), 'tfonline[gpu]' (with CUDA), "
                f"or any TensorFlow {TENSORFLOW_MIN} to {TENSORFLOW_TESTED_MAX} build")

_warned: set[str] = set()


def check_installed() -> None:
    """Raises :class:`TensorFlowRequirementError` if no ``tensorflow`` module can be imported (without importing it)."""
    if importlib.util.find_spec("tensorflow") is None:
        raise TensorFlowRequirementError(f"tfonline trains with TensorFlow, and this Python has none: {INSTALL_HINT}")


def installed_distribution() -> tuple[str, str] | None:
    """The distribution that installed the ``tensorflow`` module and its version (from its metadata), or None."""
    if importlib.util.find_spec("tensorflow") is None:
        return None
    names = importlib.metadata.packages_distributions().get("tensorflow") or ["tensorflow"]
    for name in names:
        try:
            found = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        return found.metadata["Name"], found.version
    return names[0], "unknown"


def require():
    """The ``tensorflow`` module, imported and checked against the supported versions.

    Raises:
        TensorFlowRequirementError: none is installed, or one older than the supported range.
    """
    check_installed()
    if sys.modules.get("tensorflow") is None:  # imported already, it imported fine: no need to scan the metadata
        _check_numpy()
    import tensorflow as tf

    check_version(tf.__version__)
    return tf


def check_version(version: str) -> None:
    """Raises for a TensorFlow older than :data:`TENSORFLOW_MIN`; warns once for one newer than tested."""
    found = _release(version)
    if found < _release(TENSORFLOW_MIN):
        raise TensorFlowRequirementError(
            f"tfonline needs TensorFlow {TENSORFLOW_MIN} or newer, got {version}: "
            f"pip install 'tensorflow-cpu{TENSORFLOW_REQUIREMENT}' (or the same range of the build you use)")
    if found > _release(TENSORFLOW_TESTED_MAX) and version not in _warned:
        _warned.add(version)
        warnings.warn(f"tfonline is tested with TensorFlow {TENSORFLOW_MIN} to {TENSORFLOW_TESTED_MAX}, "
                      f"got {version}; it may work", stacklevel=3)


def _check_numpy() -> None:
    """TensorFlow before 2.18 was built for numpy 1: with numpy 2 its import fails in a long traceback.

    It happens when pip installs tfonline into such an environment without being told to keep
    that TensorFlow's requirements (GPy 1.15 needs numpy 2); this says so in one line, and how to undo it.
    """
    found = installed_distribution()
    if found is None or not re.match(r"\d+\.\d+", found[1]) or _release(found[1]) >= (2, 18):
        return
    try:
        numpy = importlib.metadata.version("numpy")
    except importlib.metadata.PackageNotFoundError:
        return
    if _release(numpy)[0] >= 2:
        raise TensorFlowRequirementError(
            f"TensorFlow {found[1]} needs numpy < 2, got numpy {numpy}: pip install 'numpy<2' 'GPy<1.15' "
            f"(installing tfonline with your TensorFlow named, pip install tfonline '{found[0]}=={found[1]}', keeps it)")


def _release(version: str) -> tuple[int, int]:
    """``"2.21.0rc1"`` -> ``(2, 21)``: the major and minor release, what the range is about."""
    match = re.match(r"(\d+)\.(\d+)", version)
    if match is None:
        raise TensorFlowRequirementError(f"TensorFlow's version must look like 2.21.0, got {version!r}")
    return int(match.group(1)), int(match.group(2))
