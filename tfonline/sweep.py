"""Model-selection sweeps: a grid of one job class's attributes, one job after another on one cluster.

``tfonline.sweep(MyJob, {"lr": [0.1, 0.01], "l2": [0, 1e-4]}, db="runs.db")``
makes a ``MyJob()`` per combination, sets the grid's attributes on it, and
runs it, tuned, on one embedded cluster started once for the whole sweep
(node start-up is paid once, not per job). The jobs of a sweep share one
workload signature, so each one's tuner starts from the triples the
earlier ones left in the repository (``tuning={"resume": True}``, the
default; :mod:`tfonline.tuner.inherit`), and skips its random phase once
they weigh ``random_settings`` or more. ``tfonline report DB --compare
ID ...`` compares the sweep's jobs.

The command line form, ``tfonline sweep CLASS --grid NAME=V1,V2 ... --db DB``,
names the class as ``module:Class`` or ``path/to/file.py:Class``
(:func:`load_class`); each value is read as JSON where it can be (``0.1``,
``true``, ``"a"``), else as a string.
"""

from __future__ import annotations

import importlib
import importlib.util
import itertools
import json
import os
import sys
from typing import Any

from tfonline.exceptions import ConfigurationError
from tfonline._identity import FILE_MODULE_PREFIX
from tfonline.result import RunResult


def combinations(grid: dict[str, Any]) -> list[dict[str, Any]]:
    """The grid's combinations, in order (the last attribute varies fastest)."""
    if not isinstance(grid, dict) or not grid:
        raise ConfigurationError(f"grid must be a non-empty dict of attribute -> list of values, got {grid!r}")
    for name, values in grid.items():
        if not isinstance(values, (list, tuple)) or not values:
            raise ConfigurationError(f"grid values must be non-empty lists, got {name}={values!r}")
    names = list(grid)
    return [dict(zip(names, values)) for values in itertools.product(*(grid[n] for n in names))]


def sweep(job_class, grid: dict[str, Any], *, db: str | os.PathLike = "tfonline.db", tune: bool = True,
          nodes: int | None = None, cluster=None, **run_options) -> list[RunResult]:
    """Runs ``job_class()`` once per combination of ``grid`` (each attribute set on the job before it runs),
    one after another on one embedded cluster of ``nodes`` nodes (or on ``cluster``, a
    :class:`tfonline.cluster.Cluster` or addresses, as ``run`` takes it); returns their results in order.

    ``run_options`` go to every :meth:`MLJobFramework.run` (``setting``, ``mode``, ``max_seconds``, ...).

    Raises:
        ConfigurationError: the grid names an attribute the job class's jobs do not have, or is empty.
        RepositoryError: ``db`` is not a tfonline repository (another program's file, a newer tfonline's).
        TensorFlowRequirementError: no TensorFlow is installed, or too old a one.
    """
    from tfonline._tensorflow import require
    from tfonline.cluster import LocalCluster, default_node_count
    from tfonline.repository import Repository

    require()
    runs = combinations(grid)
    probe = job_class()
    missing = [name for name in grid if not hasattr(probe, name)]
    if missing:
        known = sorted(n for n in dir(probe) if not n.startswith("_") and not callable(getattr(probe, n, None)))
        raise ConfigurationError(f"grid names {missing[0]!r}, which {job_class.__name__} jobs do not have; they have: "
                                 f"{', '.join(known)}")
    Repository(db).close()  # another program's file, or a newer tfonline's, is refused before any node starts
    if cluster is not None:
        return [_one(job_class, values, db, tune, cluster, run_options) for values in runs]
    with LocalCluster(default_node_count() if nodes is None else nodes) as started:
        return [_one(job_class, values, db, tune, started, run_options) for values in runs]


def _one(job_class, values: dict[str, Any], db, tune: bool, cluster, run_options: dict[str, Any]) -> RunResult:
    job = job_class()
    for name, value in values.items():
        setattr(job, name, value)
    return job.run(db=db, tune=tune, cluster=cluster, **run_options)


def load_class(spec: str):
    """The :class:`MLJobFramework` subclass that ``spec`` names: ``module:Class`` (imported as Python imports it)
    or ``path/to/file.py:Class`` (the file loaded as a module, its folder first on the path, as when it runs as
    a script; its ``if __name__ == "__main__"`` part does not run).

    Raises:
        ConfigurationError: ``spec`` has another form, names nothing importable, or not such a class.
    """
    module_name, sep, class_name = spec.rpartition(":")
    if not sep or not module_name or not class_name.isidentifier():
        raise ConfigurationError(f"the job class must be module:Class or path/to/file.py:Class, got {spec!r}")
    try:
        module = _load_file(module_name) if module_name.endswith(".py") else importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigurationError(f"cannot import {module_name!r} for the job class {spec!r}: {e}") from None
    except Exception as e:  # noqa: BLE001 (the user's module failed as it ran: say where, in one line)
        raise ConfigurationError(f"importing {module_name!r} for the job class {spec!r} failed: "
                                 f"{type(e).__name__}: {e}") from None
    found = getattr(module, class_name, None)
    from tfonline.job import MLJobFramework

    if not (isinstance(found, type) and issubclass(found, MLJobFramework)):
        what = "nothing of that name" if found is None else f"a {type(found).__name__}"
        raise ConfigurationError(f"the job class {spec!r} must name an MLJobFramework subclass; "
                                 f"{module_name!r} has {what}")
    return found


def _load_file(path: str):
    full = os.path.abspath(path)
    if not os.path.isfile(full):
        raise ImportError(f"no such file {full}")
    folder = os.path.dirname(full)
    if folder not in sys.path:
        sys.path.insert(0, folder)  # its sibling modules, as when it runs as a script
    name = FILE_MODULE_PREFIX + os.path.splitext(os.path.basename(full))[0]
    spec = importlib.util.spec_from_file_location(name, full)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]  # no half-run module left behind
        raise
    return module


def parse_grid(items: list[str]) -> dict[str, list[Any]]:
    """``["lr=0.1,0.01", "l2=0"]`` -> ``{"lr": [0.1, 0.01], "l2": [0]}``: each value JSON where it parses."""
    grid: dict[str, list[Any]] = {}
    for item in items:
        name, sep, values = item.partition("=")
        if not sep or not name.strip().isidentifier() or not values.strip():
            raise ConfigurationError(f"--grid must be NAME=V1,V2,... (an attribute and its values), got {item!r}")
        grid[name.strip()] = [_value(v) for v in values.split(",")]
    return grid


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text.strip()
