"""Asking a node started by ``tfonline node`` to serve with new thread pools.

A TensorFlow server's thread pools are fixed when it starts, so new pools mean
a new server. The embedded cluster starts that itself; a node started
elsewhere restarts itself, when the driver asks it to, through the one channel
the two already share: the node's own TensorFlow server.

- Before it says it serves, the node writes its pools into the variable
  ``threads`` (int64 ``[intra, inter]``) of the container ``tfonline-control``
  on its own device (:class:`Watch`); then it reads that container's
  ``request`` variable every :data:`WATCH_S`.
- The driver writes the pools it wants into ``request``
  (:func:`request_threads`). The node, seeing pools that differ from its own,
  makes way for a new server with them on the same port
  (:mod:`tfonline._given_node`), which writes them into ``threads``: the
  driver waits for that (:func:`await_threads`).

Who may ask: only a client that can run TensorFlow ops on the node. Such a
client can already do anything the node's user can (read and write files,
end the process), so the request adds no power, and it is confined as the
node is: by its bind address, on a trusted network (README, Security). The
node takes only pools in ``[1, MAX_THREADS]`` and ignores anything else.
"""

from __future__ import annotations

import contextlib
import threading
import time

CONTAINER = "tfonline-control"
THREADS, REQUEST = "threads", "request"
WATCH_S = 0.25
MAX_THREADS = 1024
CALL_TIMEOUT_MS = 5000


def _handle(tf, index: int, name: str):
    with tf.device(f"/job:node/task:{index}/device:CPU:0"):
        return tf.raw_ops.VarHandleOp(dtype=tf.int64, shape=[2], container=CONTAINER, shared_name=name)


def _session(tf, target: str, index: int, graph):
    config = tf.compat.v1.ConfigProto(device_filters=[f"/job:node/task:{index}"],
                                      operation_timeout_in_ms=CALL_TIMEOUT_MS)
    return tf.compat.v1.Session(target, graph=graph, config=config)


class Watch:
    """The node's side: publishes its pools, then says what the driver asked for (:meth:`requested`)."""

    def __init__(self, server, index: int, intra: int, inter: int):
        import tensorflow as tf

        self.own = (intra, inter)
        graph = tf.Graph()
        with graph.as_default():
            mine, request = _handle(tf, index, THREADS), _handle(tf, index, REQUEST)
            publish = tf.raw_ops.AssignVariableOp(resource=mine, value=tf.constant(self.own, tf.int64))
            self._asked = tf.raw_ops.VarIsInitializedOp(resource=request)
            self._read = tf.raw_ops.ReadVariableOp(resource=request, dtype=tf.int64)
        self._open = lambda: _session(tf, server.target, index, graph)
        self._lost = tf.errors.AbortedError
        self._session = self._open()
        self._session.run(publish)

    def requested(self) -> tuple[int, int] | None:
        """Pools the driver asked for that differ from this node's own, else None."""
        try:
            asked = self._session.run(self._asked)
        except self._lost:  # a job's reset of this node closed every session of its master, this one too
            self._session = self._open()
            asked = self._session.run(self._asked)
        if not asked:
            return None
        intra, inter = (int(v) for v in self._session.run(self._read))
        if (intra, inter) == self.own or not (1 <= intra <= MAX_THREADS and 1 <= inter <= MAX_THREADS):
            return None
        return intra, inter


def _call(address: str, index: int, build, timeout_s: float):
    """Runs what ``build(tf)`` returns on node ``index``; None when the node does not answer within
    ``timeout_s``, or cannot run it."""
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        fetch = build(tf)
    deadline = time.monotonic() + timeout_s
    while True:
        session = _session(tf, "grpc://" + address, index, graph)
        try:
            return session.run(fetch)
        except (tf.errors.UnavailableError, tf.errors.DeadlineExceededError):
            if time.monotonic() > deadline:
                return None
            time.sleep(0.2)
        except tf.errors.OpError:  # not a tfonline node (another job name, say): it has no control container
            return None
        finally:
            with contextlib.suppress(tf.errors.OpError):  # the node restarted after the call: nothing to close
                session.close()


def read_threads(address: str, index: int, timeout_s: float = 2.0) -> tuple[int, int] | None:
    """Node ``index``'s pools as it published them; None for a node that cannot restart (or does not answer)."""

    def published(tf):
        return tf.raw_ops.VarIsInitializedOp(resource=_handle(tf, index, THREADS))

    def read(tf):
        return tf.raw_ops.ReadVariableOp(resource=_handle(tf, index, THREADS), dtype=tf.int64)

    answered = _call(address, index, published, timeout_s)
    if not answered:
        return None
    value = _call(address, index, read, timeout_s)
    return None if value is None else (int(value[0]), int(value[1]))


def request_threads(address: str, index: int, intra: int, inter: int, timeout_s: float = 5.0) -> bool:
    """Asks node ``index`` to serve with these pools; False when it does not answer."""

    def write(tf):
        assign = tf.raw_ops.AssignVariableOp(resource=_handle(tf, index, REQUEST),
                                             value=tf.constant([intra, inter], tf.int64))
        with tf.control_dependencies([assign]):
            return tf.constant(True)

    return _call(address, index, write, timeout_s) is not None


def await_threads(address: str, index: int, intra: int, inter: int, timeout_s: float) -> bool:
    """Waits until node ``index`` serves these pools (after its restart); False at the deadline."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if read_threads(address, index, timeout_s=max(0.5, deadline - time.monotonic())) == (intra, inter):
            return True
        time.sleep(0.2)
    return False


def restart_all(nodes: dict[int, tuple[str, int, int]], timeout_s: float) -> dict[int, str | None]:
    """Asks each node (index: address, intra, inter) for its pools, and waits for all side by side.

    Returns, per node, None once it serves them, else what went wrong.
    """
    problems: dict[int, str | None] = {index: "did not answer in time" for index in nodes}

    def restart(index: int, address: str, intra: int, inter: int) -> None:
        if not request_threads(address, index, intra, inter):
            problems[index] = "does not answer a request for new thread pools"
        elif await_threads(address, index, intra, inter, timeout_s):
            problems[index] = None
        else:
            problems[index] = f"did not serve its new thread pools within {timeout_s:.0f} s"

    waits = [threading.Thread(target=restart, args=(index, *node), daemon=True, name="tfonline-restart")
             for index, node in nodes.items()]
    for wait in waits:
        wait.start()
    for wait in waits:
        wait.join(timeout_s + 2 * CALL_TIMEOUT_MS / 1000)
    return problems
