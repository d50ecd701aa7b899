"""Clusters of TensorFlow server nodes: started here, or given.

A cluster is N nodes of one TensorFlow job named ``node``; which nodes act as
parameter servers and which as workers is decided per setting by the graph,
not by the cluster. :class:`LocalCluster` starts the nodes as processes on
this machine and owns them: it stops every one of them on normal exit, on an
exception and on Ctrl-C, and a node also exits by itself when its driver dies
(it watches its stdin). :class:`tfonline.given_cluster.ExistingCluster` uses
nodes started elsewhere, for instance with ``tfonline node``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from tfonline._confine import (
    LOOPBACK,
    check_bind_address,
    check_listening,
    confined_environment,
    is_wildcard,
    reserve_port,
)
from tfonline._fork_server import ForkServer, KeptForkServers, NodeProcess
from tfonline.exceptions import ClusterError, ConfigurationError, NodeFailedError

logger = logging.getLogger("tfonline")

DEFAULT_START_TIMEOUT_S = 120.0
# A node that has not answered the driver's heartbeat for this long is taken as hung (stopped, deadlocked).
DEFAULT_HEARTBEAT_TIMEOUT_S = 15.0


def default_node_count(cores: int | None = None) -> int:
    """Nodes for the embedded cluster: cores + 2, at least 3.

    On a small machine this oversubscribes the cores on purpose: a node that a
    setting leaves idle costs memory only, and the extra nodes give the tuner a
    real choice of layouts (ps and worker counts).
    """
    cores = cores or os.cpu_count() or 1
    return max(3, cores + 2)


_kept: KeptForkServers | None = None  # inside keep_fork_servers()
_kept_lock = threading.Lock()


@contextlib.contextmanager
def keep_fork_servers():
    """Inside this block, a :class:`LocalCluster` that stops keeps its fork server for the next one.

    Each cluster otherwise starts a fork server of its own, which imports
    TensorFlow (about 5 s here), and stops it with its nodes. Inside the
    block a stopped cluster's fork server, with no node left, waits idle for
    the next cluster of this process whose nodes get the same environment
    (the same ``env`` and host), which then starts in well under a second: for
    a script or a test suite that runs many jobs one after another. Leaving
    the block, on an exception or Ctrl-C too, stops every kept fork server; a
    kept one also exits by itself when this process dies. Blocks may nest
    (the outermost one stops them). Yields an object whose ``pids`` are the
    process ids of the fork servers kept idle at the moment.
    """
    global _kept
    with _kept_lock:
        outer = _kept is None
        if outer:
            _kept = KeptForkServers()
        kept = _kept
    try:
        yield kept
    finally:
        if outer:
            with _kept_lock:
                _kept = None
            kept.close()


def free_port(host: str = LOOPBACK) -> int:
    """A port free on ``host`` now (another program may take it before it is used: for tests of given clusters)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_answers(address: str, timeout_s: float = 0.5) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return True
    except OSError:
        return False


def check_addresses(addresses) -> list[str]:
    """Validates a cluster given as node addresses; returns them as a list."""
    if isinstance(addresses, str) or not isinstance(addresses, (list, tuple)) or len(addresses) < 2:
        raise ConfigurationError(
            f"cluster must be a list of at least 2 'host:port' addresses (one ps, one worker), got {addresses!r}"
        )
    for a in addresses:
        if not isinstance(a, str) or ":" not in a or not a.rsplit(":", 1)[1].isdigit():
            raise ConfigurationError(f"cluster addresses must look like 'host:port', got {a!r}")
    return list(addresses)


@dataclass(frozen=True)
class NodeThreads:
    """The server thread pools of one node (0 lets TensorFlow choose: one per core)."""

    intra_op_parallelism_threads: int = 0
    inter_op_parallelism_threads: int = 0

    @classmethod
    def one_per_core(cls) -> NodeThreads:
        """TensorFlow's own default, spelt out: one thread per core in each pool."""
        cores = os.cpu_count() or 1
        return cls(cores, cores)


class Cluster:
    """What the graph and the workers need of a cluster.

    The *pool* is the nodes a job may use, in order: every node serving
    when the job started, then those that joined it since (:meth:`join`),
    less those lost (:meth:`lose`). A setting's layout takes its ps nodes,
    then its workers, from the front of the pool
    (:class:`tfonline._graph.Layout`), so a node that joins never moves a
    setting already running.
    """

    addresses: list[str]
    lost: frozenset[int] = frozenset()
    waiting: frozenset[int] = frozenset()  # named, but not serving yet: they join once they do
    joined: tuple[int, ...] = ()
    left_out: frozenset[int] = frozenset()  # serve, but cannot join (ExistingCluster.join says why)

    @property
    def node_count(self) -> int:
        return len(self.addresses)

    @property
    def pool(self) -> list[int]:
        """The nodes the job may use, in order (see the class's description)."""
        first = [i for i in range(self.node_count) if i not in self.waiting and i not in self.joined]
        return [i for i in first + list(self.joined) if i not in self.lost and i not in self.left_out]

    def lose(self, index: int) -> None:
        """Takes node ``index`` out of the pool for good: it is no longer used, watched or reset."""
        self.lost = self.lost | {index}

    def join(self) -> list[int]:
        """The waiting nodes that serve now, added to the end of the pool (none for a cluster tfonline starts)."""
        return []

    def target(self, index: int) -> str:
        return "grpc://" + self.addresses[index]

    def node_threads(self, index: int) -> NodeThreads:
        raise NotImplementedError

    def set_node_threads(self, index: int, threads: NodeThreads) -> None:
        """Gives node ``index`` these server thread pools (a restart where needed)."""
        raise NotImplementedError

    def set_threads_of(self, changes: dict[int, NodeThreads]) -> None:
        """Gives several nodes new thread pools; a cluster that can restart nodes does so in parallel."""
        for index, threads in changes.items():
            self.set_node_threads(index, threads)

    def check_alive(self) -> None:
        """Raises :class:`NodeFailedError` naming the first node found dead."""
        raise NotImplementedError

    def stop(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def _join(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class LocalCluster(Cluster):
    """N node processes on this machine, each a ``tf.distribute.Server``.

    The nodes listen on ``host`` only (loopback by default) and get only the
    environment they need; each node's port is reserved by this object for
    its lifetime (see :mod:`tfonline._confine`). A node that stops answering
    the driver's heartbeat for ``heartbeat_timeout_s`` (stopped, or its
    process hung) counts as failed, like one that died.

    Args:
        nodes: how many nodes; :func:`default_node_count` when None.
        host: the one address the servers listen on. Another address of this
            host makes the nodes reachable from the network that address is
            on, without authentication: only on a trusted, isolated network.
            "0.0.0.0" listens on every interface, as TensorFlow does by itself.
        fork_server: fork nodes from one process that has imported TensorFlow
            (see :mod:`tfonline._node`), so that starting a node, or
            restarting one for new thread pools, takes milliseconds instead
            of an import of TensorFlow. Default: on Linux.
        start_timeout_s: how long a node may take to start serving.
        threads: every node's server thread pools, or one per node.
        env: variables to give the node processes beyond those they get
            anyway (:data:`tfonline._confine.NODE_ENV_NAMES` and prefixes).
        heartbeat_timeout_s: how long a node may leave heartbeats unanswered.
    """

    def __init__(
        self,
        nodes: int | None = None,
        host: str = LOOPBACK,
        fork_server: bool | None = None,
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
        threads: NodeThreads | list[NodeThreads] | None = None,
        env: dict[str, str] | None = None,
        heartbeat_timeout_s: float = DEFAULT_HEARTBEAT_TIMEOUT_S,
    ):
        count = default_node_count() if nodes is None else nodes
        if isinstance(count, bool) or not isinstance(count, int) or count < 2:
            raise ConfigurationError(f"nodes must be an integer >= 2 (one ps and one worker), got {nodes!r}")
        if env is not None and not (isinstance(env, dict) and all(
                isinstance(k, str) and isinstance(v, str) for k, v in env.items())):
            raise ConfigurationError(f"env must be a dict of str to str, got {env!r}")
        if isinstance(heartbeat_timeout_s, bool) or not isinstance(heartbeat_timeout_s, (int, float)) \
                or not heartbeat_timeout_s > 0:
            raise ConfigurationError(f"heartbeat_timeout_s must be a number > 0, got {heartbeat_timeout_s!r}")
        self.host = check_bind_address(host, "host")
        if is_wildcard(self.host):
            logger.warning("the cluster's nodes listen on every interface (host=%r), without authentication", host)
        self._extra_env = dict(env or {})
        self._env = confined_environment(os.environ, self.host, self._extra_env)  # checked before any node starts
        self._heartbeat_timeout_s = float(heartbeat_timeout_s)
        advertised = LOOPBACK if is_wildcard(self.host) else self.host
        self._reservations = [reserve_port(self.host) for _ in range(count)]
        self.addresses = [_join(advertised, r.getsockname()[1]) for r in self._reservations]
        self._start_timeout_s = start_timeout_s
        self._use_fork_server = sys.platform.startswith("linux") if fork_server is None else fork_server
        self._fork_server: ForkServer | None = None
        self._kept = _kept  # where its fork server comes from and goes back to; None: its own
        self._log_dir = tempfile.mkdtemp(prefix="tfonline-nodes-")
        self._lock = threading.RLock()
        self._procs: list[NodeProcess | None] = [None] * count
        # One thread per core is TensorFlow's own default and the default
        # setting's, so a job with default threads restarts no node.
        self._threads: list[NodeThreads] = (
            list(threads) if isinstance(threads, list) else [threads or NodeThreads.one_per_core()] * count
        )
        self._spawned = 0
        self._stopped = False
        self.served: list[dict] = [{} for _ in range(count)]
        try:
            self._start_all()
        except BaseException:
            self.stop()
            raise

    # -- processes -----------------------------------------------------------

    def _node_env(self) -> dict:
        env = dict(self._env)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        # XLA auto-clustering on CPU (the global_jit_level knob) only acts
        # when this flag is set in the process that executes the graph.
        flags = env.get("TF_XLA_FLAGS", "")
        if "--tf_xla_cpu_global_jit" not in flags:
            env["TF_XLA_FLAGS"] = (flags + " --tf_xla_cpu_global_jit").strip()
        # With a GPU build, each node of this host would otherwise map almost all of every
        # visible GPU's memory at its first session, and the next node would find none.
        env.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")
        return env

    def _spawn(self, deadline: float) -> NodeProcess:
        self._spawned += 1
        log_path = os.path.join(self._log_dir, f"process-{self._spawned}.log")
        if self._use_fork_server:
            if self._fork_server is None and self._kept is not None:
                self._fork_server = self._kept.take(self._node_env(), deadline)
            elif self._fork_server is None:
                self._fork_server = ForkServer(self._node_env(), os.path.join(self._log_dir, "fork-server.log"))
                self._fork_server.wait_imported(deadline)
            popen = self._fork_server.fork(log_path, deadline)
        else:
            with open(log_path, "w") as log:
                popen = subprocess.Popen(
                    [sys.executable, "-m", "tfonline._node"],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=log,
                    text=True,
                    env=self._node_env(),
                    # Own session: a Ctrl-C at the terminal reaches the
                    # driver, which then stops the nodes in order.
                    start_new_session=True,
                )
        proc = NodeProcess(popen, log_path)
        threading.Thread(target=proc.read_stdout, daemon=True, name="tfonline-node-stdout").start()
        return proc

    def _describe(self, index: int) -> str:
        return f"node {index} ({self.addresses[index]})"

    def _await(self, proc: NodeProcess, expected: str, what: str, deadline: float) -> str:
        try:
            return proc.next_line(deadline)
        except TimeoutError:
            raise ClusterError(
                f"{what} did not report '{expected}' within {self._start_timeout_s:.0f} s; log: {proc.log_tail()}"
            ) from None
        except EOFError:
            raise ClusterError(
                f"{what} exited with code {proc.popen.wait()} before '{expected}'; log: {proc.log_tail()}"
            ) from None

    def _serve(self, proc: NodeProcess, index: int, deadline: float) -> None:
        what = self._describe(index)
        line = self._await(proc, "imported", what, deadline)
        if line != "imported":
            raise ClusterError(f"{what} said {line!r}, expected 'imported'")
        threads = self._threads[index]
        spec = {
            "addresses": self.addresses,
            "task_index": index,
            "intra_op_parallelism_threads": threads.intra_op_parallelism_threads,
            "inter_op_parallelism_threads": threads.inter_op_parallelism_threads,
        }
        proc.popen.stdin.write(json.dumps(spec) + "\n")
        proc.popen.stdin.flush()
        served = json.loads(self._await(proc, "serving", what, deadline))
        while not port_answers(self.addresses[index]):
            if time.monotonic() > deadline:
                raise ClusterError(f"{what} reported serving but its port does not answer")
            time.sleep(0.05)
        check_listening(proc.popen.pid, int(self.addresses[index].rsplit(":", 1)[1]), self.host, what)
        self.served[index] = served
        proc.serving = True
        self._procs[index] = proc

    def _start_nodes(self, indices: list[int]) -> None:
        """Starts a process for each node of ``indices``, side by side, and waits until all serve."""
        deadline = time.monotonic() + self._start_timeout_s
        for i in indices:
            self._procs[i] = self._spawn(deadline)  # owned from here on, so stop() reaches it
        if len(indices) <= 1:
            for i in indices:
                self._serve(self._procs[i], i, deadline)
            return
        # Each node starts its server in its own time: hand out the specs side by side.
        with ThreadPoolExecutor(len(indices), thread_name_prefix="tfonline-serve") as pool:
            for future in [pool.submit(self._serve, self._procs[i], i, deadline) for i in indices]:
                future.result()

    def _start_all(self) -> None:
        started = time.monotonic()
        self._start_nodes(list(range(self.node_count)))
        logger.info("cluster of %d nodes serving after %.1f s", self.node_count, time.monotonic() - started)

    # -- the Cluster interface -----------------------------------------------

    def node_threads(self, index: int) -> NodeThreads:
        return self._threads[index]

    def set_node_threads(self, index: int, threads: NodeThreads) -> None:
        self.set_threads_of({index: threads})

    def set_threads_of(self, changes: dict[int, NodeThreads]) -> None:
        """Restarts every node whose pools change, side by side."""
        with self._lock:
            self.restart_nodes({i: threads for i, threads in changes.items() if self._threads[i] != threads})

    def restart_nodes(self, threads: dict[int, NodeThreads]) -> None:
        """Restarts these nodes, side by side, with these pools, whether or not the pools change."""
        with self._lock:
            old = [self._procs[i] for i in threads]
            for i, pools in threads.items():
                self._threads[i] = pools
                self._procs[i] = None
            self._end_all(old)
            self._start_nodes(list(threads))

    def restart_node(self, index: int) -> float:
        """Replaces node ``index`` by a process serving its current thread pools.

        Everything that lived on the node (variables, queues) is lost; callers
        move what they need first. A node lost by a job (:meth:`lose`) is back
        in the pool. Returns the restart's wall time in seconds.
        """
        with self._lock:
            started = time.monotonic()
            self.lost = self.lost - {index}
            self._end(self._procs[index])
            self._procs[index] = None
            # The old server may hold the port for a moment after exiting.
            self._start_nodes([index])
            return time.monotonic() - started

    def lose(self, index: int) -> None:
        """Takes node ``index`` out of the pool and stops its process, if it still runs."""
        with self._lock:
            super().lose(index)
            proc, self._procs[index] = self._procs[index], None
            if proc is not None:
                proc.popen.kill()  # it may be hung: no grace
            self._end(proc)

    @property
    def node_pids(self) -> list[int | None]:
        """Each node's process id (None for a node not serving now)."""
        return [None if p is None else p.popen.pid for p in self._procs]

    @property
    def fork_server_pid(self) -> int | None:
        """The fork server's process id, while there is one."""
        return None if self._fork_server is None else self._fork_server.popen.pid

    def check_alive(self) -> None:
        """Raises :class:`NodeFailedError` for a node that died or stopped answering, or a dead fork server."""
        now = time.monotonic()
        for index, proc in enumerate(self._procs):
            if proc is None:
                continue
            if proc.popen.poll() is not None:
                raise NodeFailedError(
                    f"{self._describe(index)} died during the job with exit code {proc.popen.returncode}", index
                )
            silent_s = proc.silent_for(now)
            if silent_s >= self._heartbeat_timeout_s:
                # Killed, so that steps waiting on it fail at once instead of waiting for good.
                proc.popen.kill()
                raise NodeFailedError(
                    f"{self._describe(index)} (pid {proc.popen.pid}) stopped answering: no heartbeat for "
                    f"{silent_s:.0f} s (stopped or hung); it was killed", index
                )
        server = self._fork_server
        if server is not None and server.popen.poll() is not None:
            raise NodeFailedError(server.gone() + "; node restarts are no longer possible", None)

    @staticmethod
    def _end(proc: NodeProcess | None, grace_s: float = 3.0) -> None:
        if proc is None:
            return
        proc.serving = False
        popen = proc.popen
        if popen.poll() is None:
            try:
                popen.stdin.close()  # a node exits on end of stdin
            except OSError:
                pass
            try:
                popen.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                popen.kill()
                popen.wait()
        for stream in (popen.stdin, popen.stdout):
            try:
                stream.close()
            except (OSError, ValueError):
                pass

    @classmethod
    def _end_all(cls, procs: list[NodeProcess | None]) -> None:
        """Ends several nodes side by side: every stdin is closed before waiting for any."""
        procs = [p for p in procs if p is not None]
        for p in procs:
            try:
                p.popen.stdin.close()
            except (OSError, ValueError):
                pass
        for p in procs:
            cls._end(p)

    def stop(self) -> None:
        """Stops every node process and the fork server, and frees the ports; safe to call twice.

        Each step runs even when an earlier one raised (the first error is raised at the end).
        """
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            try:
                self._end_all(self._procs)
            finally:
                self._procs = [None] * len(self.addresses)
                try:
                    if self._fork_server is not None and self._kept is not None:
                        self._kept.give_back(self._fork_server)
                    elif self._fork_server is not None:
                        self._fork_server.stop()
                finally:
                    self._fork_server = None
                    for reservation in self._reservations:
                        reservation.close()
                    # The nodes' logs are read for errors while the nodes run; kept after, every job left a directory.
                    shutil.rmtree(self._log_dir, ignore_errors=True)
