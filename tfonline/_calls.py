"""TensorFlow calls the driver and the switch techniques make safely: bounded, side by side, retried.

A call into TensorFlow that needs a node which died blocks for good (gRPC
keeps retrying), and Python cannot interrupt a thread inside one. These
helpers keep every such call under a deadline or in a thread the caller can
abandon, so that clean-up never hangs the driver.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import signal
import threading
import time
from concurrent.futures import Future
from typing import Any

import tensorflow as tf

from tfonline.cluster import NodeThreads
from tfonline.exceptions import essence
from tfonline.setting import THREAD_KNOBS

logger = logging.getLogger("tfonline")

CLEANUP_TIMEOUT_S = 5.0
UNAVAILABLE_GRACE_S = 15.0
# A training step that TensorFlow aborts is run again, up to this many times
# in a row (see run_retrying_aborts).
ABORTED_RETRIES = 3


@contextlib.contextmanager
def signals_as_interrupts():
    """SIGTERM raises KeyboardInterrupt in the main thread, as SIGINT does.

    So ``kill`` and Ctrl-C both unwind through the runner's ``finally``
    blocks, which stop every node. Outside the main thread (where Python
    cannot install handlers) this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"received signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def each_step(*steps) -> None:
    """Runs every step, even when one before it raised; then raises the first error (later ones are logged)."""
    first = None
    for step in steps:
        try:
            step()
        except BaseException as e:
            if first is None:
                first = e
            else:
                logger.warning("a clean-up step failed as well: %s: %s", type(e).__name__, e)
    if first is not None:
        raise first


def join_all(threads, timeout_s: float) -> list[bool]:
    """Joins ``threads`` under one deadline, ``timeout_s`` from now; returns, for each, whether it ended."""
    deadline = time.monotonic() + timeout_s
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return [not thread.is_alive() for thread in threads]


def side_by_side(calls, what: str, why: str = "a node is gone", timeout_s: float = CLEANUP_TIMEOUT_S) -> list[bool]:
    """Runs each call in a daemon thread, all under one deadline (``timeout_s``); errors are ignored.

    Closing a session, or resetting a container, on a cluster with a dead
    node blocks for good: the master keeps retrying the node. Clean-up must
    never hang the driver, so a call still running at the deadline is
    abandoned; side by side, the worst case costs the deadline once, not
    once per call. Returns, for each call, whether it finished.
    """

    def guarded(call):
        with contextlib.suppress(Exception):
            call()

    threads = [threading.Thread(target=guarded, args=(call,), name="tfonline-cleanup", daemon=True)
               for call in calls]
    for thread in threads:
        thread.start()
    finished = join_all(threads, timeout_s)
    if not all(finished):
        logger.warning("%s: %d of %d did not finish within %.0f s (%s); abandoned", what,
                       finished.count(False), len(finished), timeout_s, why)
    return finished


def until_reachable(call, grace_s: float = UNAVAILABLE_GRACE_S) -> None:
    """Runs ``call`` (side-effect free), retrying while TensorFlow says a node is unavailable.

    Right after nodes restart, the other nodes' gRPC channels to them can
    still be in their reconnect back-off, and a step fails with
    UnavailableError although every node serves. A probe through every
    channel a worker uses, retried for up to ``grace_s``, waits that out
    before training.
    """
    deadline = time.monotonic() + grace_s
    while True:
        try:
            call()
            return
        except tf.errors.UnavailableError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def for_each(call, items) -> None:
    """``call(item)`` for every item, side by side in daemon threads; the first error is raised after all end.

    Daemon threads, not a ``ThreadPoolExecutor``: the interpreter joins an executor's threads at exit, and a
    call stuck on a node that went silent (a cut link) would keep the process from ever exiting."""
    items = list(items)
    if len(items) == 1:
        call(items[0])
        return
    errors: list[BaseException | None] = [None] * len(items)

    def run(index: int, item) -> None:
        try:
            call(item)
        except BaseException as e:  # raised in the caller's thread, below
            errors[index] = e

    threads = [threading.Thread(target=run, args=(i, item), name="tfonline-each", daemon=True)
               for i, item in enumerate(items)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    first = next((e for e in errors if e is not None), None)
    if first is not None:
        raise first


# Sessions whose close did not finish: kept for the life of the process (see close_all).
_UNCLOSED: list = []


def close_all(sessions) -> None:
    """Closes sessions side by side under one deadline (see :func:`side_by_side`).

    Closing a session of a cluster with a dead node blocks for good. A
    session still open after the deadline is kept here for good, so that
    its ``__del__`` (which closes it too) never runs and cannot block
    whatever thread the garbage collector happens to run in. (Dropping its
    C handle instead crashed the process: a worker's step stuck on the node
    returned later and was tried again on the dropped handle, a
    segmentation fault in ``TF_SessionRun``.)
    """
    sessions = [s for s in sessions if not s._closed]
    finished = side_by_side([session.close for session in sessions], f"closing {len(sessions)} session(s)")
    _UNCLOSED.extend(session for session, done in zip(sessions, finished) if not done)


def reset_node(address: str, containers: list[str], node: int, timeout_s: float) -> None:
    """Drops ``containers`` from node ``node`` (at ``address``), through the node's own master: what
    ``tf.compat.v1.Session.reset`` does, for that node alone.

    ``Session.reset`` cannot name the nodes: TensorFlow's ``GrpcSession::Reset``
    leaves the request's device filters empty, so the master asks every node
    of the cluster spec to clean up, a lost one too. It waits for that one
    for good, inside the master service's request thread, and the node then
    serves no master request at all: a later job's first session there hung.
    This sends the same request (TensorFlow's ``ResetRequest``: the
    containers, field 1, and device filters, field 2) with the node's own
    device filter, through grpcio (a dependency of TensorFlow's).
    """
    import grpc

    request = b"".join(_text_field(1, c) for c in containers) + _text_field(2, f"/job:node/task:{node}")
    with grpc.insecure_channel(address) as channel:
        channel.unary_unary("/tensorflow.MasterService/Reset")(request, timeout=timeout_s)


def _text_field(number: int, text: str) -> bytes:
    """A protocol buffer string field: its key (wire type 2), its length as a varint, its bytes."""
    data, length = text.encode(), b""
    size = len(data)
    while True:
        size, low = size >> 7, size & 0x7F
        length += bytes([low | (0x80 if size else 0)])
        if not size:
            return bytes([number << 3 | 2]) + length + data


class DaemonExecutor:
    """Runs the calls submitted to it one after another, in one daemon thread: a ``ThreadPoolExecutor(1)``
    that a call stuck for good (a TensorFlow call that needs a lost node) can neither hold up the process's
    exit nor the calls after it: the caller gives the stuck thread up (:meth:`idle`) and makes a new one."""

    def __init__(self, name: str):
        self._calls: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def submit(self, call, *args) -> Future:
        future: Future = Future()
        self._calls.put((future, call, args))
        return future

    def idle(self, within_s: float) -> bool:
        """Whether every call submitted so far ends within ``within_s``."""
        try:
            self.submit(lambda: None).result(within_s)
            return True
        except TimeoutError:
            return False

    def shutdown(self, wait_s: float) -> None:
        """Runs what was submitted, then ends; waits up to ``wait_s`` for it."""
        self._calls.put(None)
        self._thread.join(wait_s)

    def _serve(self) -> None:
        while (item := self._calls.get()) is not None:
            future, call, args = item
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(call(*args))
                except BaseException as e:
                    future.set_exception(e)


def recv_cancelled(error: tf.errors.OpError) -> bool:
    """Whether ``error`` is a step's receive from another node cancelled under it (another part of the step
    failed, such as an abort), not the step's own cancellation."""
    return isinstance(error, tf.errors.CancelledError) and "RecvFromRemoteAsync is cancelled" in error.message


def run_retrying_aborts(step, retries: int = ABORTED_RETRIES):
    """``step()``, run again when TensorFlow aborts it, up to ``retries`` times in a row.

    An asynchronous step that fails with ``AbortedError`` can simply be run
    again: a push that may or may not have been applied is what
    asynchronous SGD tolerates anyway. ``tf.compat.v1.train.MonitoredSession``
    treats the error as recoverable too. Seen once here: a fixed job (no
    switch, no restart) failed at step 12,471 of 13,930 with an
    ``AbortedError`` from its worker and no message. Synchronous steps are
    not retried: their accumulators may hold a part of the step.

    A step whose transfer from another node was cancelled
    (``CancelledError: ... RecvFromRemoteAsync is cancelled``, :func:`recv_cancelled`)
    is an aborted step too: a fixed LogR run of the full benchmark (three
    ps nodes) failed so at step 34,144, in a sitting where "The same
    RunGraph (Worker) request was received twice" aborts were retried
    every few minutes. A step cancelled for any other reason (its session
    closed, its input) is not run again here.
    """
    for attempt in range(retries + 1):
        try:
            return step()
        except (tf.errors.AbortedError, tf.errors.CancelledError) as e:
            if attempt == retries or not (isinstance(e, tf.errors.AbortedError) or recv_cancelled(e)):
                raise
            logger.warning("a step was aborted (%s: %s); running it again", type(e).__name__, essence(e.message))


def node_of(device: str) -> int:
    """The node index of a device string such as ``/job:node/task:2/device:CPU:0``."""
    return int(device.split("/task:")[1].split("/")[0])


def threads_of(setting: dict[str, Any]) -> NodeThreads:
    return NodeThreads(*(setting[k] for k in THREAD_KNOBS))
