"""Asking a node started by ``tfonline node`` to serve with new thread pools.

A TensorFlow server's thread pools are fixed when it starts, so new pools mean
a new server. The embedded cluster starts that itself; a node started
elsewhere restarts itself, when the driver asks it to, through the one channel
the two already share: the node's own TensorFlow server.

- Before it says it serves, the node writes its pools into the variable
  ``threads`` (int64 ``[intra, inter]``) of the container ``tfonline-control``
  on its own device, and the cores it offers into ``cores`` (:class:`Watch`);
  then it reads that container's ``request`` variable every :data:`WATCH_S`.
- The driver writes the pools it wants into ``request``
  (:func:`request_threads`). The node, seeing pools that differ from its own,
  makes way for a new server with them on the same port
  (:mod:`tfonline._given_node`), which writes them into ``threads``: the
  driver waits for that (:func:`await_threads`).

- A job's driver holds each node of its pool (:class:`Claim`): it writes a
  ``lease`` there, ``[its token, the node's clock]``, and renews it every
  :data:`LOOK_S`. Another driver's job is refused a node whose lease is
  fresher than :data:`LEASE_S`: a restart for new pools would drop what the
  first job keeps there.
- A node asked to leave (``tfonline node`` given SIGUSR1: a planned drain)
  writes ``[1, drain_s]`` into ``leaving`` (``[0, 0]`` while it serves). The
  driver reads ``leaving`` as it renews its lease, moves the job off the
  node and then writes ``[2, 0]`` (:meth:`Claim.release`): the node stops.
  A node that no job holds stops at once; one whose job does not release
  it stops ``drain_s`` after it was asked.

Who may ask: only a client that can run TensorFlow ops on the node. Such a
client can already do anything the node's user can (read and write files,
end the process), so the request adds no power, and it is confined as the
node is: by its bind address, on a trusted network (README, Security). The
node takes only pools in ``[1, MAX_THREADS]`` and ignores anything else.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
import time

CONTAINER = "tfonline-control"
THREADS, REQUEST, LEAVING, CORES, LEASE = "threads", "request", "leaving", "cores", "lease"
SERVING, GOING, RELEASED = 0, 1, 2  # the states of ``leaving``
WATCH_S = 0.25
LOOK_S = 1.0  # the driver renews its lease on each node, and reads its ``leaving``, this often
LEASE_S = 3.0  # a lease not renewed for this long has lapsed: its driver is gone
TOKEN = secrets.randbits(62) | 1  # this process's drivers' (so the jobs of one sweep follow each other)
MAX_THREADS = 1024
CALL_TIMEOUT_MS = 5000


def _handle(tf, index: int, name: str):
    with tf.device(f"/job:node/task:{index}/device:CPU:0"):
        return tf.raw_ops.VarHandleOp(dtype=tf.int64, shape=[2], container=CONTAINER, shared_name=name)


def _session(tf, target: str, index: int, graph, timeout_ms: int = CALL_TIMEOUT_MS):
    config = tf.compat.v1.ConfigProto(device_filters=[f"/job:node/task:{index}"],
                                      operation_timeout_in_ms=timeout_ms)
    return tf.compat.v1.Session(target, graph=graph, config=config)


class Watch:
    """The node's side: publishes its pools, then says what the driver asked for (:meth:`requested`)."""

    def __init__(self, server, index: int, intra: int, inter: int, cores: int):
        import tensorflow as tf

        self.own = (intra, inter)
        graph = tf.Graph()
        with graph.as_default():
            mine, request, leaving, offered = (_handle(tf, index, name) for name in (THREADS, REQUEST, LEAVING, CORES))
            publish = [tf.raw_ops.AssignVariableOp(resource=mine, value=tf.constant(self.own, tf.int64)),
                       tf.raw_ops.AssignVariableOp(resource=leaving, value=tf.constant([SERVING, 0], tf.int64)),
                       tf.raw_ops.AssignVariableOp(resource=offered, value=tf.constant([cores, 0], tf.int64))]
            self._held = _lease_age(tf, index)
            self._asked = tf.raw_ops.VarIsInitializedOp(resource=request)
            self._read = tf.raw_ops.ReadVariableOp(resource=request, dtype=tf.int64)
            self._drain_s = tf.compat.v1.placeholder(tf.int64, [])
            self._leave = tf.raw_ops.AssignVariableOp(resource=leaving, value=tf.stack([GOING, self._drain_s]))
            self._left = tf.raw_ops.ReadVariableOp(resource=leaving, dtype=tf.int64)
        self._open = lambda: _session(tf, server.target, index, graph)
        self._lost = tf.errors.AbortedError
        self._session = self._open()
        self._session.run(publish)

    def _run(self, fetch, feed=None):
        try:
            return self._session.run(fetch, feed)
        except self._lost:  # a job's reset of this node closed every session of its master, this one too
            self._session = self._open()
            return self._session.run(fetch, feed)

    def requested(self) -> tuple[int, int] | None:
        """Pools the driver asked for that differ from this node's own, else None."""
        if not self._run(self._asked):
            return None
        intra, inter = (int(v) for v in self._run(self._read))
        if (intra, inter) == self.own or not (1 <= intra <= MAX_THREADS and 1 <= inter <= MAX_THREADS):
            return None
        return intra, inter

    def leave(self, drain_s: int) -> None:
        """Says that this node leaves within ``drain_s`` (a planned drain)."""
        self._run(self._leave, {self._drain_s: drain_s})

    def released(self) -> bool:
        """Whether the driver has moved its job off this node since :meth:`leave`."""
        return int(self._run(self._left)[0]) == RELEASED

    def held(self) -> bool:
        """Whether a job's driver holds this node (:class:`Claim`: its lease renewed within :data:`LEASE_S`)."""
        try:
            token, age_ms = self._run(self._held)
        except Exception:  # noqa: BLE001 (no lease written yet: no driver has held it)
            return False
        return int(token) != 0 and age_ms < LEASE_S * 1000


class Claim:
    """The driver's hold on the nodes of a given cluster for one job, and their planned drains.

    :meth:`take` checks that no other driver holds a node (its ``lease``,
    ``[driver token, the node's clock in ms]``, renewed within
    :data:`LEASE_S`) and writes this driver's. A thread of its own then, every
    :data:`LOOK_S`, renews the lease on each node of ``pool()`` and reads its
    ``leaving`` in the same call (never the monitor's thread: a node that does
    not answer would hold it); :meth:`leaving` hands over each node found
    leaving once. :meth:`close` clears the leases.
    """

    def __init__(self, addresses: list[str], pool):
        self.addresses, self.pool = addresses, pool
        self._found: dict[int, int] = {}  # node -> its drain_s, until handed over
        self._handed: set[int] = set()
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._look, name="tfonline-claim", daemon=True)
        self._calls: dict[int, list] = {}  # node -> [graph, fetches, session or None]: made once

    def take(self) -> None:
        """Holds every node of the pool for this job, and starts renewing the hold.

        Raises:
            ClusterError: a node is held by another driver's job.
        """
        from tfonline.exceptions import ClusterError

        for index in self.pool():
            held = _call(self.addresses[index], index, lambda tf, i=index: _lease_age(tf, i), 2.0)
            if held is not None and int(held[0]) not in (0, TOKEN) and held[1] < LEASE_S * 1000:
                raise ClusterError(f"node {index} ({self.addresses[index]}) serves another driver's job (its claim "
                                   f"was renewed {held[1] / 1000:.1f} s ago): a given cluster runs one job at a time")
        for index in self.pool():
            self._renew(index)
        self._thread.start()

    def leaving(self) -> dict[int, int]:
        """The nodes found leaving since the last call (node -> the seconds it said it waits)."""
        with self._lock:
            found, self._found = self._found, {}
        return found

    def release(self, index: int) -> bool:
        """Tells node ``index`` that the job is off it: it stops. False when it does not answer."""
        released = _call(self.addresses[index], index, lambda tf: _assign(tf, index, LEAVING, [RELEASED, 0]), 2.0)
        return released is not None

    def close(self) -> None:
        """The job ends: its hold on the nodes left goes (another driver may use them at once). The thread is
        waited for :data:`LOOK_S` at most (a renewal on a node that just died can take a call's whole
        timeout), so that a renewal rarely comes after the lease is cleared (it would hold for LEASE_S)."""
        self._closed.set()
        if self._thread.is_alive():
            self._thread.join(LOOK_S)
        for index in self.pool():
            _call(self.addresses[index], index, lambda tf, i=index: _assign(tf, i, LEASE, [0, 0]), 0.5)

    def _look(self) -> None:
        while not self._closed.wait(LOOK_S):
            for index in self.pool():
                if self._closed.is_set():
                    break
                state = self._renew(index)
                if state is not None and int(state[0]) == GOING and index not in self._handed:
                    with self._lock:
                        self._found[index] = int(state[1])
                        self._handed.add(index)
        for _, _, session in self._calls.values():
            if session is not None:
                with contextlib.suppress(Exception):
                    session.close()

    def _renew(self, index: int):
        """Renews the lease on node ``index`` and returns its ``leaving`` (a session kept open); None when the
        node cannot be reached now."""
        import tensorflow as tf

        call = self._calls.get(index)
        if call is None:
            graph = tf.Graph()
            with graph.as_default():
                fetches = [_assign(tf, index, LEASE, None),
                           tf.raw_ops.ReadVariableOp(resource=_handle(tf, index, LEAVING), dtype=tf.int64)]
            call = self._calls[index] = [graph, fetches, None]
        try:
            if call[2] is None:
                call[2] = _session(tf, "grpc://" + self.addresses[index], index, call[0])
            return call[2].run(call[1])[1]
        except tf.errors.OpError:  # a job's reset closed the session, or the node is gone: opened anew next time
            call[2] = None
            return None


def _now_ms(tf, index: int):
    """The node's own clock, in ms (``tf.timestamp`` runs on the node)."""
    with tf.device(f"/job:node/task:{index}/device:CPU:0"):
        return tf.cast(tf.timestamp() * 1000.0, tf.int64)


def _assign(tf, index: int, name: str, value):
    """Writes ``value`` (None: this driver's lease, at the node's clock) into node ``index``'s ``name``."""
    value = tf.stack([tf.constant(TOKEN, tf.int64), _now_ms(tf, index)]) if value is None else tf.constant(
        value, tf.int64)
    with tf.control_dependencies([tf.raw_ops.AssignVariableOp(resource=_handle(tf, index, name), value=value)]):
        return tf.constant(True)


def _lease_age(tf, index: int):
    """``[the token of the driver that holds node index (0: none), ms since it renewed its lease]``."""
    lease = tf.raw_ops.ReadVariableOp(resource=_handle(tf, index, LEASE), dtype=tf.int64)
    return tf.stack([lease[0], _now_ms(tf, index) - lease[1]])


def _call(address: str, index: int, build, timeout_s: float):
    """Runs what ``build(tf)`` returns on node ``index``; None when the node does not answer within
    ``timeout_s``, or cannot run it."""
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        fetch = build(tf)
    deadline = time.monotonic() + timeout_s
    while True:  # each try within timeout_s too: a node that died takes a call's whole timeout
        session = _session(tf, "grpc://" + address, index, graph, min(CALL_TIMEOUT_MS, int(timeout_s * 1000)))
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


def _read(address: str, index: int, name: str, timeout_s: float):
    """Node ``index``'s variable ``name``, in one call; None when it is not set (a node that cannot restart, or
    of another kind: any TensorFlow error) or the node does not answer."""
    return _call(address, index, lambda tf: tf.raw_ops.ReadVariableOp(resource=_handle(tf, index, name),
                                                                       dtype=tf.int64), timeout_s)


def read_threads(address: str, index: int, timeout_s: float = 2.0) -> tuple[int, int] | None:
    """Node ``index``'s pools as it published them; None for a node that cannot restart (or does not answer)."""
    value = _read(address, index, THREADS, timeout_s)
    return None if value is None else (int(value[0]), int(value[1]))


def read_cores(address: str, index: int, timeout_s: float = 2.0) -> int | None:
    """The cores node ``index`` offers (``tfonline node --cores``), as it published them; None when it did not."""
    value = _read(address, index, CORES, timeout_s)
    return None if value is None else int(value[0])


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

    Returns, per node, None once it serves them, else what went wrong. A request waits for its node's answer
    no longer than ``timeout_s`` (and 5 s).
    """
    problems: dict[int, str | None] = {index: "did not answer in time" for index in nodes}

    def restart(index: int, address: str, intra: int, inter: int) -> None:
        if not request_threads(address, index, intra, inter, timeout_s=min(5.0, timeout_s)):
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
