"""``tfonline node``: one node of a given cluster, which serves the thread pools its job's driver asks for.

The process imports TensorFlow once and serves in a forked child. When the
driver asks for other pools (:mod:`tfonline._control`), the child says so,
writes them to its parent and exits, and the parent forks a child that serves
them on the same port, in well under a second (a new process would import
TensorFlow again: 4 s of CPU here). Forking after the import is safe for the
reason :mod:`tfonline._node` gives for its fork server.

The parent stays for the node's life: stopping it (SIGTERM, Ctrl-C) stops the
child, its death kills the child (``PR_SET_PDEATHSIG``), and a child that dies
of anything but a request ends it with the child's code, so that a lost node
stays lost. Each child prints the ``serving`` line (its own pid among the
fields) when it serves, and a ``restarting`` line before it makes way.

SIGUSR1 asks the node to leave without loss (a planned drain): the child says
so to the driver (:mod:`tfonline._control`), prints a ``leaving`` line, and
serves on until the driver has moved its job off the node (its variables by
ODMR, its worker by TDR) and released it, or for ``drain_s`` at most; then the
node stops, exit code 0. A node whose pools are fixed stops at once.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import sys
import time

RESTART_EXIT = 75  # a child's exit code when it makes way for new pools (written to its parent first)
_PR_SET_PDEATHSIG = 1


def supervise(addresses: list[str], index: int, pools: tuple[int, int], bind: str, restartable: bool,
              drain_s: int = 30, cores: int | None = None) -> int:
    """Serves node ``index`` until stopped, or drained (SIGUSR1, within ``drain_s``); returns the exit code.
    ``cores`` is what the node offers the job's thread pools (default: this host's)."""
    cores = cores or os.cpu_count() or 1
    import tensorflow  # noqa: F401  (the import every child inherits)

    child = {"pid": 0}
    stopping = []

    def tell_child(signum: int) -> None:
        if child["pid"]:
            with contextlib.suppress(ProcessLookupError):  # between two children
                os.kill(child["pid"], signum)

    def stop(signum, frame):
        stopping.append(signum)
        tell_child(signal.SIGTERM)

    def drain(signum, frame):
        tell_child(signal.SIGUSR1)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGUSR1, drain)
    while True:
        ours, theirs = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            os.close(ours)
            os._exit(_child(addresses, index, pools, bind, restartable, theirs, drain_s, cores))
        os.close(theirs)
        child["pid"] = pid
        _, status = os.waitpid(pid, 0)
        with os.fdopen(ours, "rb") as pipe:
            asked = pipe.read()
        if stopping:
            return 0
        if os.WIFEXITED(status) and os.WEXITSTATUS(status) == RESTART_EXIT and asked:
            pools = tuple(json.loads(asked))
            continue
        return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


def _child(addresses, index: int, pools: tuple[int, int], bind: str, restartable: bool, pipe: int,
           drain_s: int, cores: int) -> int:
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    signal.signal(signal.SIGINT, lambda *_: os._exit(0))
    asked_to_leave: list[float] = []
    # Without a watch there is no one to tell: the node stops at once.
    signal.signal(signal.SIGUSR1, (lambda *_: asked_to_leave.append(time.monotonic())) if restartable
                  else (lambda *_: os._exit(0)))
    if sys.platform.startswith("linux"):  # die with the parent, even after its SIGKILL
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() == 1:
            return 1
    try:
        from tfonline._confine import check_listening
        from tfonline._control import Watch
        from tfonline._node import _server_description, start_server

        server = start_server(addresses, index, *pools)
        check_listening(os.getpid(), int(addresses[index].rsplit(":", 1)[1]), bind, f"node {index}")
        watch = Watch(server, index, *pools, cores) if restartable else None  # published before it says so
        print(json.dumps(_server_description(server)), flush=True)
        asked = _await_request(watch, index, asked_to_leave, drain_s)
    except Exception as e:  # noqa: BLE001 (said on stderr, as the command's own errors are)
        print(f"tfonline: error: {e}", file=sys.stderr, flush=True)
        return 1
    if asked is None:  # drained
        return 0
    print(json.dumps({"event": "restarting", "intra_op_parallelism_threads": asked[0],
                      "inter_op_parallelism_threads": asked[1]}), flush=True)
    os.write(pipe, json.dumps(asked).encode())
    return RESTART_EXIT


def _await_request(watch, index: int, asked_to_leave: list[float], drain_s: int) -> tuple[int, int] | None:
    """Serves until the driver asks for other pools (never, without a ``watch``), and returns them; or, once
    ``asked_to_leave`` holds the time SIGUSR1 came, until the driver releases the node, or ``drain_s`` after,
    and returns None."""
    from tfonline._control import WATCH_S

    while watch is None:
        time.sleep(3600)  # in Python, not in server.join(): signal handlers run between sleeps
    said = False
    while True:
        time.sleep(WATCH_S)
        if asked_to_leave and time.monotonic() > asked_to_leave[0] + drain_s:
            print(json.dumps({"event": "left", "released": False}), flush=True)
            print(f"tfonline: warning: node {index}: no job moved off it within {drain_s} s; it stops",
                  file=sys.stderr, flush=True)
            return None
        try:
            if asked_to_leave and not said:
                watch.leave(drain_s)
                said = True
                print(json.dumps({"event": "leaving", "drain_s": drain_s}), flush=True)
            released = said and watch.released()
            if said and (released or not watch.held()):  # moved off, or no job to move off
                print(json.dumps({"event": "left", "released": released}), flush=True)
                return None
            asked = None if said else watch.requested()
        except Exception as e:  # noqa: BLE001 (the watch is a helper: the node serves on without it)
            print(f"tfonline: warning: node {index} cannot read restart requests: {type(e).__name__}: {e}",
                  file=sys.stderr, flush=True)
            time.sleep(1.0 if asked_to_leave else 5.0)
            continue
        if asked is not None:
            return asked
