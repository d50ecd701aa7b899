"""The driver's side of the node processes it starts, and of the fork server of :mod:`tfonline._node`.

One process imports TensorFlow once and forks a ready node process for each
request (see :mod:`tfonline._node` for the protocol). :class:`ForkServer`
starts it and asks it for nodes; :class:`ForkedPopen` is the part of
:class:`subprocess.Popen` the cluster uses, for one forked node.

A cluster starts its own fork server and stops it with its nodes, so each
cluster pays one import of TensorFlow (about 5 s of wall time and 7 s of CPU
here). Inside :func:`tfonline.cluster.keep_fork_servers`, a stopped cluster's
fork server is kept instead (:class:`KeptForkServers`), idle and without
children, for the next cluster of the same process whose nodes get the same
environment; leaving the block stops every kept one.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

from tfonline.exceptions import ClusterError

HEARTBEAT_INTERVAL_S = 1.0  # the driver pings each node it started this often


def log_tail(path: str, n: int = 3) -> str:
    """The last ``n`` meaningful lines of a node's log, joined by " | "."""
    try:
        with open(path, errors="replace") as f:
            lines = [ln.strip() for ln in f if ln.strip() and not ln.startswith(("I0000", "WARNING: All log"))]
    except OSError:
        return ""
    return " | ".join(lines[-n:])


class ForkedPopen:
    """The part of :class:`subprocess.Popen` the cluster uses, for a node forked by the fork server."""

    def __init__(self, server: ForkServer, pid: int, stdin, stdout):
        self._server = server
        self.pid = pid
        self.stdin = stdin
        self.stdout = stdout
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._server.exit_code(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"node pid {self.pid}", timeout)
            time.sleep(0.02)
        return self.returncode

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class ForkServer:
    """Driver side of the fork server of :mod:`tfonline._node`: one process
    with TensorFlow imported that forks ready node processes on request."""

    def __init__(self, env: dict, log_path: str):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.env, self.log_path = dict(env), log_path
        with open(log_path, "w") as log:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "tfonline._node", "--fork-server", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                env=env,
                start_new_session=True,
            )
        theirs.close()
        self._sock = ours
        self._replies: queue.Queue = queue.Queue()
        self._exits: dict[int, int] = {}
        self._request_lock = threading.Lock()
        self._spoiled = False  # a request failed: a late reply may still come, so it serves no other cluster
        threading.Thread(target=self._read, daemon=True, name="tfonline-fork-server").start()

    def _read(self) -> None:
        while True:
            try:
                packet = self._sock.recv(1024)
            except OSError:
                packet = b""
            if not packet:
                self._replies.put(None)
                return
            message = json.loads(packet)
            if "exit" in message:
                self._exits[message["exit"]] = message["code"]
            else:
                if "forked" in message:  # a pid the system gave again: an earlier child's exit is not this one's
                    self._exits.pop(message["forked"], None)
                self._replies.put(message)

    def _reply(self, deadline: float, what: str) -> dict:
        try:
            message = self._replies.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            self._spoiled = True
            raise ClusterError(f"the fork server did not {what} in time; log: {log_tail(self.log_path)}") from None
        if message is None:
            code = self.popen.wait()
            raise ClusterError(f"the fork server exited with code {code}; log: {log_tail(self.log_path)}")
        return message

    def wait_imported(self, deadline: float) -> None:
        self._reply(deadline, "import TensorFlow")

    def fork(self, log_path: str, deadline: float) -> ForkedPopen:
        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            with self._request_lock:
                try:
                    socket.send_fds(self._sock, [b"fork"], [stdin_r, stdout_w, log_fd])
                except OSError as e:
                    self._spoiled = True
                    raise ClusterError(f"{self.gone()}; it cannot start node processes ({e.strerror})") from e
                pid = self._reply(deadline, "fork a node")["forked"]
        except BaseException:
            os.close(stdin_w)
            os.close(stdout_r)
            raise
        finally:
            for fd in (stdin_r, stdout_w, log_fd):
                os.close(fd)
        return ForkedPopen(self, pid, os.fdopen(stdin_w, "w"), os.fdopen(stdout_r))

    def gone(self) -> str:
        """Says that the fork server died, with its exit code and log."""
        code = self.popen.poll()
        how = f"with exit code {code}" if code is not None else "(its socket closed)"
        return f"the fork server (pid {self.popen.pid}) died {how}; log: {log_tail(self.log_path) or 'empty'}"

    def exit_code(self, pid: int) -> int | None:
        if pid in self._exits:
            return self._exits[pid]
        if self.popen.poll() is not None and not _pid_alive(pid):
            return -1  # exited after the fork server did: its code is unknown
        return None

    @property
    def reusable(self) -> bool:
        """Alive, every request answered, and every node it forked has exited: fit to serve another cluster."""
        return (not self._spoiled and self.popen.poll() is None and self._replies.empty()
                and all(not _pid_alive(pid) for pid in self._forked_alive()))

    def _forked_alive(self) -> list[int]:
        try:
            with open(f"/proc/{self.popen.pid}/task/{self.popen.pid}/children") as f:
                return [int(pid) for pid in f.read().split()]
        except OSError:
            return []

    def stop(self) -> None:
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        try:
            self.popen.wait(timeout=3.0)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()


class KeptForkServers:
    """Fork servers kept idle between the clusters of one process, one per node environment.

    :meth:`take` gives a cluster a kept server whose nodes would get ``env``, or
    starts one; :meth:`give_back` keeps a cluster's server when it is fit to
    serve again (:attr:`ForkServer.reusable`) and none is kept for its
    environment yet, and stops it otherwise; :meth:`close` stops every kept one.
    Their logs are in a folder of this object's, since a cluster's own folder
    goes with the cluster.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._idle: dict[tuple, ForkServer] = {}  # by the environment its nodes get
        self._log_dir = tempfile.mkdtemp(prefix="tfonline-fork-servers-")
        self._started = 0
        self._closed = False

    @staticmethod
    def _key(env: dict) -> tuple:
        return tuple(sorted(env.items()))

    def take(self, env: dict, deadline: float) -> ForkServer:
        with self._lock:
            server = self._idle.pop(self._key(env), None)
        if server is not None and server.reusable:
            return server
        if server is not None:  # died while kept
            server.stop()
        with self._lock:
            self._started += 1
            log_path = os.path.join(self._log_dir, f"fork-server-{self._started}.log")
        server = ForkServer(env, log_path)
        try:
            server.wait_imported(deadline)
        except BaseException:
            server.stop()
            raise
        return server

    def give_back(self, server: ForkServer) -> None:
        key = self._key(server.env)
        with self._lock:
            keep = not self._closed and key not in self._idle and server.reusable
            if keep:
                self._idle[key] = server
        if not keep:
            server.stop()

    @property
    def pids(self) -> set[int]:
        """The process ids of the fork servers kept idle now."""
        with self._lock:
            return {server.popen.pid for server in self._idle.values()}

    def close(self) -> None:
        """Stops every kept fork server and removes their logs; a server given back after is stopped."""
        with self._lock:
            self._closed = True
            idle, self._idle = list(self._idle.values()), {}
        try:
            for server in idle:
                server.stop()
        finally:
            shutil.rmtree(self._log_dir, ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@dataclass
class NodeProcess:
    """A node process the cluster started: its stdout's lines, and the heartbeats it has left unanswered."""

    popen: subprocess.Popen | ForkedPopen
    log_path: str
    lines: queue.Queue = field(default_factory=queue.Queue)
    serving: bool = False  # answers heartbeats from here on
    last_ping: float = 0.0  # monotonic time of the last heartbeat sent
    unanswered_since: float | None = None  # the first heartbeat sent since the last answer

    def read_stdout(self) -> None:
        for line in self.popen.stdout:
            if line.strip() == "pong":
                self.unanswered_since = None
                continue
            self.lines.put(line)
        self.lines.put(None)

    def silent_for(self, now: float) -> float:
        """Sends a heartbeat when one is due; returns how long the node has left heartbeats unanswered."""
        if not self.serving:
            return 0.0
        if now - self.last_ping >= HEARTBEAT_INTERVAL_S:
            self.last_ping = now
            if self.unanswered_since is None:
                self.unanswered_since = now
            try:
                self.popen.stdin.write("ping\n")
                self.popen.stdin.flush()
            except (OSError, ValueError):
                pass  # its end: poll() says so
        return 0.0 if self.unanswered_since is None else now - self.unanswered_since

    def next_line(self, deadline: float) -> str:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            try:
                line = self.lines.get(timeout=min(remaining, 0.5))
            except queue.Empty:
                continue
            if line is None:
                raise EOFError
            return line.strip()

    def log_tail(self, n: int = 3) -> str:
        return log_tail(self.log_path, n)
