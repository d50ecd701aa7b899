"""A node process: one ``tf.distribute.Server`` of the job ``node``.

The driver starts this module as ``python -m tfonline._node``. The process
imports TensorFlow first (the slow part, about 4 s here), says ``imported``
on stdout, and then waits for one JSON line on stdin that names its cluster,
its index and its server thread pools. That split is what makes a *warm
spare* possible: a process that has paid for the import and becomes any
node the moment it is told which.

Once serving, the process prints one JSON line describing the server
definition TensorFlow actually holds (so callers can read back the thread
knobs) and then blocks on stdin. End of stdin means the driver is gone, and
the node exits: a node never outlives its driver, even after SIGKILL.
"""

from __future__ import annotations

import json
import os
import sys


def _server_description(server) -> dict:
    config = server.server_def.default_session_config
    return {
        "event": "serving",
        "pid": os.getpid(),
        "task_index": server.server_def.task_index,
        "target": server.target.decode() if isinstance(server.target, bytes) else server.target,
        "intra_op_parallelism_threads": config.intra_op_parallelism_threads,
        "inter_op_parallelism_threads": config.inter_op_parallelism_threads,
    }


def start_server(addresses: list[str], task_index: int, intra_op_threads: int, inter_op_threads: int):
    """Starts and returns the server of node ``task_index`` of ``addresses``."""
    import tensorflow as tf

    # A server in a process with an eager context also exposes that context's
    # /job:localhost CPU, and tf.data functions then fail with "Multiple CPU
    # devices". A node runs graphs only.
    tf.compat.v1.disable_eager_execution()
    config = tf.compat.v1.ConfigProto(
        intra_op_parallelism_threads=intra_op_threads,
        inter_op_parallelism_threads=inter_op_threads,
    )
    cluster = tf.train.ClusterSpec({"node": addresses})
    return tf.distribute.Server(cluster, job_name="node", task_index=task_index, config=config, start=True)


def main() -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow  # noqa: F401  (the import is the warm-up)

    print("imported", flush=True)
    line = sys.stdin.readline()
    if not line:
        return 0
    spec = json.loads(line)
    server = start_server(
        spec["addresses"],
        spec["task_index"],
        spec["intra_op_parallelism_threads"],
        spec["inter_op_parallelism_threads"],
    )
    print(json.dumps(_server_description(server)), flush=True)
    # Block until the driver closes our stdin (or dies); then exit at once,
    # without the slow TensorFlow teardown.
    while sys.stdin.readline():
        pass
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
