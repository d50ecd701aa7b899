"""The embedded cluster's processes: nodes forked from one fork server, or one process per node."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest
from conftest import node_processes

from tfonline.cluster import LocalCluster, NodeThreads, keep_fork_servers
from tfonline.exceptions import ClusterError, NodeFailedError


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


@pytest.mark.parametrize("fork_server", [True, False])
def test_nodes_restart_with_new_thread_pools_and_stop_with_the_cluster(fork_server, tmp_path, monkeypatch):
    before = node_processes(os.getpid())  # a shared cluster of other tests may be running
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the nodes' logs go
    with LocalCluster(2, fork_server=fork_server) as cluster:
        (logs,) = tmp_path.iterdir()
        assert sorted(p.name for p in logs.iterdir())[-1] == "process-2.log"
        first = [s["pid"] for s in cluster.served]
        parents = {_parent(pid) for pid in first}
        if fork_server:
            (server,) = parents  # both nodes are forks of one process ...
            assert server != os.getpid()  # ... that is not the driver
        else:
            assert parents == {os.getpid()}
        cluster.set_threads_of({0: NodeThreads(1, 1), 1: NodeThreads(1, 2)})
        assert [s["pid"] for s in cluster.served] != first
        assert [(s["intra_op_parallelism_threads"], s["inter_op_parallelism_threads"]) for s in cluster.served] == [
            (1, 1),
            (1, 2),
        ]
        assert {_parent(s["pid"]) for s in cluster.served} == parents
        cluster.check_alive()
        assert node_processes(os.getpid()) - before
    assert node_processes(os.getpid()) == before
    assert list(tmp_path.iterdir()) == []  # the logs went with the nodes: every job once left a directory


def test_a_forked_node_that_exits_is_reported_with_its_exit_code():
    before = node_processes(os.getpid())
    with LocalCluster(2) as cluster:
        os.kill(cluster.served[1]["pid"], 15)
        with pytest.raises(NodeFailedError, match=r"node 1 \(127.0.0.1:\d+\) died during the job with exit code -15"):
            for _ in range(200):  # the fork server reports an exit within ~50 ms
                cluster.check_alive()
                time.sleep(0.05)
    assert node_processes(os.getpid()) == before


def test_a_restarted_node_is_not_taken_for_an_earlier_one_that_had_its_pid(cluster):
    """The system gives pids again (pid_max is 32,768 here, and every TensorFlow thread takes one): a
    restarted node once got the pid of a node that had exited with 0 before it, and the fork server's record
    of that exit made the new node look dead ("node 0 died during the job with exit code 0", the sweep
    benchmark, after a few hundred node restarts). Every pid but the live nodes' is given a recorded exit of 0
    here, as if each had been used before."""
    server, live = cluster._fork_server, set(cluster.node_pids)  # the record of exits that pid reuse would leave
    server._exits.update({pid: 0 for pid in range(1, 1 << 22) if pid not in live})
    try:
        threads = cluster.node_threads(0)
        cluster.restart_nodes({0: threads})
        cluster.check_alive()
        assert server.exit_code(cluster.node_pids[0]) is None
    finally:
        server._exits.clear()


@pytest.mark.parametrize(
    "fork_server, message",
    [
        (True, r"the fork server exited with code 1; log: "),
        (False, r"node 0 \(127.0.0.1:\d+\) exited with code 1 before 'imported'; log: "),
    ],
)
def test_a_node_process_that_cannot_start_is_a_cluster_error(monkeypatch, fork_server, message):
    before = node_processes(os.getpid())
    monkeypatch.setattr(sys, "executable", "/bin/false")
    with pytest.raises(ClusterError, match=message):
        # An environment no other test's nodes get: no kept fork server serves it, a new one is started.
        LocalCluster(2, fork_server=fork_server, env={"TFONLINE_TEST_CANNOT_START": "1"})
    assert node_processes(os.getpid()) == before


def test_an_aborted_step_or_a_cancelled_receive_is_run_again_but_not_forever_and_other_errors_are_not():
    import tensorflow as tf

    from tfonline._calls import run_retrying_aborts

    calls = []

    def aborts_twice():
        calls.append("step")
        if len(calls) <= 2:
            raise tf.errors.AbortedError(None, None, "Cleanup called")
        return 0.5, None

    assert run_retrying_aborts(aborts_twice) == (0.5, None) and len(calls) == 3

    def always_aborts():
        calls.append("step")
        raise tf.errors.AbortedError(None, None, "gone")

    calls.clear()
    with pytest.raises(tf.errors.AbortedError):
        run_retrying_aborts(always_aborts, retries=2)
    assert len(calls) == 3

    def recv_cancelled_once():  # as a fixed LogR run of the full benchmark failed (three ps nodes)
        calls.append("step")
        if len(calls) == 1:
            raise tf.errors.CancelledError(None, None, "CANCELLED: From /job:node/replica:0/task:3: "
                                                       "RecvFromRemoteAsync is cancelled.")
        return 0.25, None

    calls.clear()
    assert run_retrying_aborts(recv_cancelled_once) == (0.25, None) and len(calls) == 2

    # Not run again: a session closed under its step (a switch gave the step up), and any other error.
    for error in (tf.errors.CancelledError(None, None, "Step was cancelled by an explicit call to `Session::Close()`."),
                  tf.errors.InvalidArgumentError(None, None, "bad feed")):
        def fails(error=error):
            calls.append("step")
            raise error

        calls.clear()
        with pytest.raises(type(error)):
            run_retrying_aborts(fails)
        assert len(calls) == 1


def _children(pid: int) -> set[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return {int(p) for p in f.read().split()}


def test_clusters_one_after_another_share_a_kept_fork_server_and_another_environment_gets_its_own():
    with keep_fork_servers() as kept:  # inside the session's block (conftest): the same kept servers
        with LocalCluster(2) as first:
            server = first.fork_server_pid
            assert server not in kept.pids  # in use: not idle
        assert server in kept.pids and not _children(server)  # kept, with no node left
        with LocalCluster(2) as second:
            assert second.fork_server_pid == server and set(second.node_pids) == _children(server)
            second.set_threads_of({0: NodeThreads(1, 1)})  # restarts fork from it too
            assert set(second.node_pids) == _children(server)
        with LocalCluster(2, env={"TFONLINE_TEST_OTHER": "given"}) as other:
            another = other.fork_server_pid
            assert another != server
            with open(f"/proc/{other.node_pids[0]}/environ", "rb") as f:
                assert b"TFONLINE_TEST_OTHER=given" in f.read().split(b"\0")
        assert {server, another} <= kept.pids


def _dead(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_a_kept_fork_server_that_died_is_not_given_to_the_next_cluster():
    with keep_fork_servers() as kept:
        with LocalCluster(2) as first:
            server = first.fork_server_pid
        os.kill(server, 9)
        deadline = time.monotonic() + 10
        while not _dead(server) and time.monotonic() < deadline:
            time.sleep(0.05)
        with LocalCluster(2) as second:
            new = second.fork_server_pid
            assert new != server
            second.check_alive()
        assert server not in kept.pids and new in kept.pids


_KEEPER = textwrap.dedent("""
    import json, os, signal, sys
    from tfonline.cluster import LocalCluster, keep_fork_servers

    with keep_fork_servers() as kept:
        with keep_fork_servers() as inner:
            assert inner is kept
            with LocalCluster(2) as cluster:
                nodes = cluster.node_pids
        print(json.dumps({"kept": sorted(kept.pids), "nodes": nodes}), flush=True)  # the inner block stopped none
        if sys.argv[1] == "killed":
            os.kill(os.getpid(), signal.SIGKILL)
    print(json.dumps({"kept": sorted(kept.pids)}), flush=True)
""")


@pytest.mark.parametrize("end", ["leaves the block", "killed"])
def test_kept_fork_servers_stop_when_the_outermost_block_ends_or_the_process_dies(end):
    out = subprocess.run([sys.executable, "-c", _KEEPER, end], capture_output=True, text=True, timeout=120)
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(lines[0]["kept"]) == 1, out.stderr
    (server,) = lines[0]["kept"]
    if end == "killed":
        assert out.returncode == -9 and len(lines) == 1
    else:
        assert out.returncode == 0 and lines[1] == {"kept": []}, out.stderr
    deadline = time.monotonic() + 10
    while {server, *lines[0]["nodes"]} & node_processes() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not {server, *lines[0]["nodes"]} & node_processes()  # a killed driver's closes the kept one's socket
