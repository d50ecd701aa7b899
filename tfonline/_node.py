"""A node process: one ``tf.distribute.Server`` of the job ``node``.

A node starts as ``python -m tfonline._node``, or as a fork of the *fork
server* (``python -m tfonline._node --fork-server FD``, below). Either way it
says ``imported`` on stdout once TensorFlow is imported, and then waits for
one JSON line on stdin that names its cluster, its index and its server
thread pools.

Once serving, the process prints one JSON line describing the server
definition TensorFlow actually holds (so callers can read back the thread
knobs) and then answers each ``ping`` line on stdin with ``pong`` (the
driver's heartbeat). End of stdin means the driver is gone, and the node
exits: a node never outlives its driver, even after SIGKILL.

A node listens only where :mod:`tfonline._confine` lets it: the process
that starts it (the cluster, or ``tfonline node``) preloads the bind library
and sets the address.

The fork server
---------------
Importing TensorFlow takes about 4 s of CPU here, and a node whose thread
pools change must be a new process (a server's pools are fixed when it
starts). The fork server imports TensorFlow once and then forks a ready node
for each request, in about 20 ms. A request is one packet on a Unix
``SOCK_SEQPACKET`` socket carrying three file descriptors: the new node's
stdin, stdout and stderr. The fork server answers ``{"forked": pid}``, and
``{"exit": pid, "code": c}`` when a node it forked has exited (negative:
killed by that signal). It exits when the driver closes the socket, or dies.

Forking after the import is safe here because the import leaves no thread
busy: the two native threads it starts wait on futexes (checked on
TensorFlow 2.21, Linux), and a node creates its own threads only after the
fork. Where that does not hold (not Linux), clusters start one process per
node instead (``LocalCluster(fork_server=False)``).
"""

from __future__ import annotations

import json
import os
import select
import socket
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


def _serve() -> int:
    """Says ``imported``, serves the spec read from stdin, and exits at end of stdin."""
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
    # Answer the driver's heartbeats until it closes our stdin (or dies); then
    # exit at once, without the slow TensorFlow teardown. A stopped or hung
    # process answers none, and the driver fails the job naming this node.
    for line in sys.stdin:
        if line.strip() == "ping":
            print("pong", flush=True)
    sys.stdout.flush()
    os._exit(0)


def _become_node(sock: socket.socket, fds: list[int]) -> None:
    """In a forked child: takes the request's descriptors as 0, 1, 2 and serves."""
    sock.close()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    sys.stdin = open(0, closefd=False)
    sys.stdout = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", closefd=False)
    try:
        code = _serve()
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _report_exits(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        try:
            sock.send(json.dumps({"exit": pid, "code": code}).encode())
        except OSError:
            return


def fork_server(fd: int) -> int:
    """Imports TensorFlow once, then forks a node per request on socket ``fd``."""
    import tensorflow  # noqa: F401  (the import is what every fork inherits)

    sock = socket.socket(fileno=fd)
    sock.send(b'{"imported": true}')
    while True:
        ready, _, _ = select.select([sock], [], [], 0.05)
        _report_exits(sock)
        if not ready:
            continue
        try:
            message, fds, _, _ = socket.recv_fds(sock, 1024, 3)
        except OSError:
            return 0
        if not message:  # the driver closed its end, or died
            return 0
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _become_node(sock, fds)
        for f in fds:
            os.close(f)
        sock.send(json.dumps({"forked": pid}).encode())


def main() -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if len(sys.argv) == 3 and sys.argv[1] == "--fork-server":
        return fork_server(int(sys.argv[2]))
    import tensorflow  # noqa: F401  (the import is the slow part)

    return _serve()


if __name__ == "__main__":
    sys.exit(main())
