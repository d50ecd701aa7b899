"""A node lost mid-job on a local cluster: a worker's loss is survived, an idle node's too."""

from __future__ import annotations

import os
import signal
import sqlite3
import tempfile

import pytest
from conftest import after_iterations
from jobs import QuadraticJob, TinyLogR

from tfonline.cli import main


def _rows(db, sql):
    return sqlite3.connect(db).execute(sql).fetchall()


@pytest.fixture
def whole():
    """A cluster of 3 nodes of the test's own: not the shared one, as a lost node cannot simply be restarted in
    place. A thread of the job that lost it stays inside TensorFlow, retrying the node, and keeps the process's
    gRPC connection to that address in its reconnect back-off: a later job's first steps to a node restarted
    there failed with "failed to connect to all addresses ... Connection refused"."""
    from tfonline.cluster import LocalCluster

    with LocalCluster(3) as cluster:
        yield cluster


def test_lost_nodes_are_left_behind_and_the_job_goes_on(capsys):
    """Four nodes, ps1 w2: node 3 idle, then node 2, the second worker, killed mid-job."""
    from tfonline.cluster import LocalCluster

    job = TinyLogR()
    job.target_loss = 1e-9
    with LocalCluster(4) as cluster, tempfile.TemporaryDirectory() as folder:
        db_path = os.path.join(folder, "runs.db")
        pids = cluster.node_pids
        killers = [after_iterations(db_path, 40, lambda: os.kill(pids[3], signal.SIGKILL))[0],
                   after_iterations(db_path, 120, lambda: os.kill(pids[2], signal.SIGKILL))[0]]
        result = job.run(db=db_path, cluster=cluster, setting={"ps": 1, "worker": 2}, max_steps=400, quiet=True)
        for killer in killers:
            killer.join()
        assert result.stop_reason == "max_steps (400) reached" and result.iterations == 400
        assert cluster.lost == frozenset({2, 3}) and cluster.node_pids[2:] == [None, None]
        (idle_at, idle, idle_action), = _rows(db_path, "select step, role, action from node_losses where node = 3")
        (step, node, role, cause, action), = _rows(
            db_path, "select step, node, role, cause, action from node_losses where node = 2")
        assert (idle, idle_action) == ("idle", "it was not in use; the job went on") and 40 <= idle_at < step
        assert (node, role) == (2, "worker") and 120 <= step < 400
        assert cause.startswith("node 2 (127.0.0.1:") and "died during the job with exit code -9" in cause
        assert action == "the job went on as ps1 w1: TDR over the worker(s) left"
        (moved_at, to, types), = _rows(db_path, "select r.step, s.short, r.types from reconfigurations r "
                                                "join settings s on s.id = r.to_setting_id")
        assert moved_at == step and to.startswith("ps1 w1") and types == "I-a"  # the idle node's loss: no switch
        after = _rows(db_path, f"select count(*), max(worker) from iterations where step > {step}")[0]
        assert after == (400 - step, 0)  # one worker left, rank 0
        assert main(["report", db_path]) == 0
    out = capsys.readouterr().out
    assert "cluster:         4 nodes, 2 lost" in out
    assert f"node lost:       at step {step}: {cause} (a worker node); {action}" in out


def test_a_synchronous_job_discards_the_step_in_flight_and_trains_on_exactly(whole, tmp_path):
    """QuadraticJob's synchronous step is the same update whatever the worker count: a job that loses a worker
    mid-step must train on exactly as one that did not (a gradient of the step in flight, left in an
    accumulator, would change the next update)."""
    losses = {}
    for name in ("whole", "lost"):
        db = str(tmp_path / f"{name}.db")
        if name == "lost":
            killer, _ = after_iterations(db, 60, lambda victim=whole.node_pids[2]: os.kill(victim, signal.SIGKILL))
        QuadraticJob().run(db=db, cluster=whole, mode="sync", setting={"ps": 1, "worker": 2}, max_steps=200,
                           quiet=True)
        losses[name] = [loss for loss, in _rows(db, "select loss from iterations order by step")]
    killer.join()
    assert _rows(db, "select role from node_losses") == [("worker",)]
    assert len(losses["lost"]) == len(losses["whole"]) == 200
    assert losses["lost"] == losses["whole"]
