"""TensorFlow's ``TF_CONFIG`` convention: a cluster named in the environment.

Cluster managers (Kubernetes' TFJob, SageMaker, Vertex AI, a shell script)
start each process of a TensorFlow job with ``TF_CONFIG`` set to JSON such as::

    {"cluster": {"chief": ["a:2222"], "ps": ["b:2222"], "worker": ["c:2222", "d:2222"]},
     "task": {"type": "worker", "index": 1}}

tfonline's nodes are all alike (the tuner decides which serve as parameter
servers), so the cluster's addresses are read as one list, in a fixed
order: ``chief``, ``master``, ``ps``, ``worker``, then any other task type
by name (``evaluator``...), each type's addresses in their order. The
driver (``run(cluster="TF_CONFIG")``) takes that list; a node (``tfonline
node --tf-config``) takes it and its own place in it, from ``task``. The
same environment, given to the driver and to every node, therefore makes
one cluster. The processes at those addresses must be tfonline nodes: a
server started by TensorFlow itself serves jobs named ``ps``/``worker``,
not tfonline's ``node``.
"""

from __future__ import annotations

import json
import os
from typing import Mapping

from tfonline.exceptions import ConfigurationError

VARIABLE = "TF_CONFIG"
FIRST_TYPES = ("chief", "master", "ps", "worker")  # the order of the flattened list; other types follow by name


def _read(environ: Mapping[str, str]) -> dict:
    text = environ.get(VARIABLE)
    if not text:
        raise ConfigurationError(f"the {VARIABLE} environment variable must hold the cluster (JSON), got none set")
    try:
        config = json.loads(text)
    except ValueError as e:
        raise ConfigurationError(f"{VARIABLE} must be JSON, got {text[:60]!r}: {e}") from None
    cluster = config.get("cluster") if isinstance(config, dict) else None
    if not isinstance(cluster, dict) or not cluster:
        raise ConfigurationError(f"{VARIABLE} must name a cluster ({{\"cluster\": {{\"worker\": [\"host:port\", "
                                 f"...]}}}}), got {text[:60]!r}")
    for kind, addresses in cluster.items():
        if not isinstance(addresses, list) or not all(isinstance(a, str) for a in addresses):
            raise ConfigurationError(f"{VARIABLE}'s cluster must map each task type to a list of 'host:port', "
                                     f"got {kind}={addresses!r}")
    return config


def _order(cluster: dict) -> list[tuple[str, int, str]]:
    kinds = [k for k in FIRST_TYPES if k in cluster] + sorted(k for k in cluster if k not in FIRST_TYPES)
    return [(kind, index, address) for kind in kinds for index, address in enumerate(cluster[kind])]


def addresses(environ: Mapping[str, str] = os.environ) -> list[str]:
    """The cluster of ``TF_CONFIG`` as tfonline's list of node addresses (chief, master, ps, worker, others)."""
    return [address for _, _, address in _order(_read(environ)["cluster"])]


def node_index(environ: Mapping[str, str] = os.environ) -> int:
    """This process's place in :func:`addresses`, from ``TF_CONFIG``'s ``task``."""
    config = _read(environ)
    task = config.get("task")
    if not isinstance(task, dict) or "type" not in task:
        raise ConfigurationError(f"{VARIABLE} must name this node's task ({{\"type\": \"worker\", \"index\": 0}}), "
                                 f"got task={task!r}")
    kind, index = task["type"], task.get("index", 0)
    for place, (other_kind, other_index, _) in enumerate(_order(config["cluster"])):
        if (other_kind, other_index) == (kind, index):
            return place
    raise ConfigurationError(f"{VARIABLE}'s task {kind}:{index} is not in its cluster "
                             f"({', '.join(f'{k}: {len(v)}' for k, v in config['cluster'].items())})")
