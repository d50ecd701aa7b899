"""The embedded cluster's processes: nodes forked from one fork server, or one process per node."""

from __future__ import annotations

import os
import sys
import tempfile
import time

import pytest
from conftest import node_processes

from tfonline.cluster import LocalCluster, NodeThreads
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
        LocalCluster(2, fork_server=fork_server)
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
