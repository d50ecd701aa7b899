"""A node lost mid-job on the shared local cluster: a worker's loss is survived, an idle node's too."""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
import time

import pytest
from jobs import QuadraticJob, TinyLogR

from tfonline.cli import main


def _rows(db, sql):
    return sqlite3.connect(db).execute(sql).fetchall()


def _kill_after(db, iterations, pid):
    """Kills ``pid`` from a thread once the job in ``db`` has recorded ``iterations``; returns the thread."""

    def wait_and_kill():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if _rows(db, "select count(*) from iterations")[0][0] >= iterations:
                    break
            except sqlite3.OperationalError:
                pass  # not created yet
            time.sleep(0.05)
        os.kill(pid, signal.SIGKILL)

    thread = threading.Thread(target=wait_and_kill, daemon=True)
    thread.start()
    return thread


@pytest.fixture
def whole(cluster):
    """The shared cluster, made whole again after the test (a lost node restarted, back in the pool)."""
    yield cluster
    for node in sorted(cluster.lost):
        cluster.restart_node(node)
    assert cluster.pool == [0, 1, 2]


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_a_lost_worker_is_left_behind_and_the_job_goes_on(whole, db_path, mode, capsys):
    job = TinyLogR() if mode == "async" else QuadraticJob()
    job.target_loss = 1e-9
    killer = _kill_after(db_path, 60, whole.node_pids[2])  # ps1 w2: node 2 is the second worker
    result = job.run(db=db_path, cluster=whole, mode=mode, setting={"ps": 1, "worker": 2}, max_steps=400,
                     quiet=True)
    killer.join()
    assert result.stop_reason == "max_steps (400) reached" and result.iterations == 400
    (step, node, role, cause, action), = _rows(db_path, "select step, node, role, cause, action from node_losses")
    assert (node, role) == (2, "worker") and 60 <= step < 400
    assert cause.startswith("node 2 (127.0.0.1:") and "died during the job with exit code -9" in cause
    assert action == "the job went on as ps1 w1: TDR over the worker(s) left"
    (moved_at, to, types), = _rows(db_path, "select r.step, s.short, r.types from reconfigurations r "
                                            "join settings s on s.id = r.to_setting_id")
    assert moved_at == step and to.startswith("ps1 w1") and types == "I-a"
    after = _rows(db_path, f"select count(*), max(worker) from iterations where step > {step} "
                           "and setting_id = (select to_setting_id from reconfigurations)")[0]
    assert after[0] > 0 and after[1] in (0, None)  # one worker left: rank 0 (sync records no rank)
    losses = [loss for loss, in _rows(db_path, "select loss from iterations order by step")]
    assert all(loss == loss and abs(loss) < 1e6 for loss in losses)
    assert whole.lost == frozenset({2}) and whole.node_pids[2] is None
    assert main(["report", db_path]) == 0
    out = capsys.readouterr().out
    assert "cluster:         3 nodes, 1 lost" in out
    assert f"node lost:       at step {step}: {cause} (a worker node); {action}" in out


def test_a_synchronous_job_discards_the_step_in_flight_and_trains_on_exactly(whole, tmp_path):
    """QuadraticJob's synchronous step is the same update whatever the worker count: a job that loses a worker
    mid-step must train on exactly as one that did not (a gradient of the step in flight, left in an
    accumulator, would change the next update)."""
    losses = {}
    for name in ("whole", "lost"):
        db = str(tmp_path / f"{name}.db")
        if name == "lost":
            killer = _kill_after(db, 80, whole.node_pids[2])
        QuadraticJob().run(db=db, cluster=whole, mode="sync", setting={"ps": 1, "worker": 2}, max_steps=300,
                           quiet=True)
        losses[name] = [loss for loss, in _rows(db, "select loss from iterations order by step")]
    killer.join()
    assert _rows(db, "select role from node_losses") == [("worker",)]
    assert len(losses["lost"]) == len(losses["whole"]) == 300
    assert losses["lost"] == losses["whole"]


def test_an_idle_node_lost_is_left_behind_without_a_switch(whole, db_path):
    job = TinyLogR()
    job.target_loss = 1e-9
    killer = _kill_after(db_path, 40, whole.node_pids[2])  # ps1 w1 uses nodes 0 and 1
    result = job.run(db=db_path, cluster=whole, setting={"ps": 1, "worker": 1}, max_steps=300, quiet=True)
    killer.join()
    assert result.stop_reason == "max_steps (300) reached"
    assert _rows(db_path, "select node, role, action from node_losses") == [
        (2, "idle", "it was not in use; the job went on")]
    assert _rows(db_path, "select count(*) from reconfigurations") == [(0,)]
    assert whole.pool == [0, 1]
