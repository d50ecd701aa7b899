"""A cluster of nodes started elsewhere, for instance with ``tfonline node``: tfonline neither starts nor
stops them, but takes in those that start serving mid-job, and restarts them with new thread pools when they
can (:mod:`tfonline._control`)."""

from __future__ import annotations

import logging
import threading
import time

from tfonline import _control
from tfonline.cluster import Cluster, NodeThreads, check_addresses, port_answers
from tfonline.exceptions import ClusterError, ConfigurationError, NodeFailedError

logger = logging.getLogger("tfonline")

# A given cluster looks this often for its waiting nodes (ExistingCluster.join).
JOIN_LOOK_S = 1.0
# A node's port answers a moment before it publishes its thread pools (tfonline._control.Watch), longer on a busy
# host: a restartable cluster waits this long for a newly serving node's pools before it leaves the node out.
PUBLISH_GRACE_S = 15.0
# A node of a given cluster serves new thread pools within this (a fork of a process with TensorFlow imported).
RESTART_TIMEOUT_S = 30.0


class ExistingCluster(Cluster):
    """Nodes started elsewhere, e.g. ``tfonline node --cluster A,B,C --index I``.

    tfonline neither starts nor stops these nodes. A node started by
    ``tfonline node`` publishes its thread pools and serves new ones when
    asked (:mod:`tfonline._control`): when every node serving at the start
    does, the cluster is :attr:`restartable` and its thread knobs are tuned
    as the embedded cluster's are. Otherwise (a node started with
    ``--fixed-threads``, or a plain TensorFlow server) the pools are fixed
    by how the nodes were started, and ``threads`` says what they are (one
    per core, ``tfonline node``'s default, when not given).
    """

    def __init__(self, addresses: list[str], threads: NodeThreads | None = None):
        self.addresses = check_addresses(addresses)
        missing = [i for i, a in enumerate(self.addresses) if not port_answers(a, timeout_s=2.0)]
        if len(self.addresses) - len(missing) < 2:  # a ps and a worker
            raise ClusterError("cluster nodes must be serving, but nothing answers at "
                               + ", ".join(self.addresses[i] for i in missing))
        self.waiting = frozenset(missing)
        self._next_look = 0.0
        for i in missing:
            logger.warning("node %d (%s) does not answer: the job starts without it, and takes it in once it "
                           "serves", i, self.addresses[i])
        published = {i: _control.read_threads(self.addresses[i], i) for i in self.pool}
        deadline = time.monotonic() + PUBLISH_GRACE_S
        while None in published.values() and any(published.values()) and time.monotonic() < deadline:
            time.sleep(JOIN_LOOK_S)  # some nodes publish pools: the others may be about to
            published.update({i: _control.read_threads(self.addresses[i], i)
                              for i, pools in published.items() if pools is None})
        self.restartable = all(pools is not None for pools in published.values())
        unpublished = [i for i, pools in published.items() if pools is None] if any(published.values()) else []
        for i in unpublished:
            logger.warning("node %d (%s) cannot restart with new thread pools, as the others can: every node keeps "
                           "the pools it was started with", i, self.addresses[i])
        # The thread knobs' bound: the fewest cores a node offers (`tfonline node --cores`), when all say.
        offered = [_control.read_cores(self.addresses[i], i) for i in self.pool] if self.restartable else [None]
        self.cores: int | None = None if None in offered else min(offered)
        self._fixed = threads or NodeThreads.one_per_core()
        self._threads = {i: NodeThreads(*published[i]) if self.restartable else self._fixed for i in self.pool}
        self._restarting: set[int] = set()
        self._unpublished: dict[int, float] = {}  # waiting nodes that serve, but have published no pools: since
        self._lock = threading.Lock()

    def node_threads(self, index: int) -> NodeThreads:
        return self._threads[index]

    def set_node_threads(self, index: int, threads: NodeThreads) -> None:
        self.set_threads_of({index: threads})

    def set_threads_of(self, changes: dict[int, NodeThreads]) -> None:
        """Asks every node whose pools change to serve the new ones, and waits until all do, side by side.

        Raises:
            ConfigurationError: the nodes cannot restart, and the pools differ from theirs.
            NodeFailedError: a node does not answer, or did not serve its new pools within
                :data:`RESTART_TIMEOUT_S`.
        """
        changes = {i: t for i, t in changes.items() if self._threads[i] != t}
        if changes and not self.restartable:
            index, threads = next(iter(changes.items()))
            fixed = self._threads[index]
            raise ConfigurationError(
                f"thread knobs of a given cluster are fixed at {fixed.intra_op_parallelism_threads}/"
                f"{fixed.inter_op_parallelism_threads} (intra/inter); got {threads.intra_op_parallelism_threads}/"
                f"{threads.inter_op_parallelism_threads} for node {index}")
        if not changes:
            return
        with self._lock:
            self._restarting |= set(changes)
        try:
            problems = _control.restart_all({i: (self.addresses[i], t.intra_op_parallelism_threads,
                                                 t.inter_op_parallelism_threads) for i, t in changes.items()},
                                            RESTART_TIMEOUT_S)
            for index, problem in problems.items():
                if problem is None:
                    self._threads[index] = changes[index]
            for index, problem in problems.items():
                if problem is not None:
                    raise NodeFailedError(f"node {index} ({self.addresses[index]}) {problem}", index)
        finally:
            with self._lock:
                self._restarting -= set(changes)

    def claim(self) -> _control.Claim | None:
        """Holds the nodes for one job (:class:`_control.Claim`, taken: raises ``ClusterError`` when another
        driver's job holds one); None when the nodes cannot say (the cluster is not :attr:`restartable`)."""
        if not self.restartable:
            return None
        claim = _control.Claim(self.addresses, lambda: self.pool)
        claim.take()
        return claim

    def check_alive(self) -> None:
        for i in self.pool:
            a = self.addresses[i]
            if not port_answers(a, timeout_s=2.0):
                with self._lock:
                    if i in self._restarting:
                        continue
                raise NodeFailedError(f"node {i} ({a}) stopped answering during the job", i)

    def join(self) -> list[int]:
        """The waiting nodes whose port answers now (looked for once every :data:`JOIN_LOOK_S`).

        In a restartable cluster, a node that cannot restart (it publishes
        no pools within :data:`PUBLISH_GRACE_S` of serving) is not taken in:
        the tuner could not give it a setting's pools.
        """
        if not self.waiting or time.monotonic() < self._next_look:
            return []
        self._next_look = time.monotonic() + JOIN_LOOK_S
        serving = [i for i in sorted(self.waiting) if port_answers(self.addresses[i], timeout_s=0.2)]
        for i in list(serving):
            published = _control.read_threads(self.addresses[i], i) if self.restartable else None
            if self.restartable and published is None:
                serving.remove(i)
                first_seen = self._unpublished.setdefault(i, time.monotonic())
                if time.monotonic() - first_seen >= PUBLISH_GRACE_S:  # else it may not have published yet
                    logger.warning("node %d (%s) serves but cannot restart with new thread pools, as the others "
                                   "can: the job goes on without it", i, self.addresses[i])
                    self.waiting, self.left_out = self.waiting - {i}, self.left_out | {i}
                continue
            self._threads[i] = self._fixed if published is None else NodeThreads(*published)
        self.waiting = self.waiting - set(serving)
        self.joined = self.joined + tuple(serving)
        return serving
