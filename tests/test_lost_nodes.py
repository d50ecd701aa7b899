"""A node lost mid-job on a local cluster: a worker's, a ps node's and an idle node's losses are survived."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import tempfile

from conftest import after_iterations, node_processes
from jobs import QuadraticJob, TinyLogR

from tfonline.cli import main


def _rows(db, sql):
    return sqlite3.connect(db).execute(sql).fetchall()


def test_lost_nodes_are_left_behind_and_the_job_goes_on(capsys):
    """Five nodes, ps2 w2: node 4 idle, then node 3, the second worker, then node 1, a ps, killed mid-job."""
    from tfonline.cluster import LocalCluster

    job = TinyLogR()
    job.target_loss = 1e-9
    with LocalCluster(5) as cluster, tempfile.TemporaryDirectory() as folder:
        db_path = os.path.join(folder, "runs.db")
        pids = list(cluster.node_pids)
        checkpointed = ("select count(*) from checkpoints c join node_losses l on c.step > l.step "
                        "where l.role = 'worker'")  # a checkpoint after the worker's loss
        killers = [after_iterations(db_path, 40, lambda: os.kill(pids[4], signal.SIGKILL))[0],
                   after_iterations(db_path, 120, lambda: os.kill(pids[3], signal.SIGKILL))[0],
                   after_iterations(db_path, 1, lambda: os.kill(pids[1], signal.SIGKILL), count=checkpointed)[0]]
        result = job.run(db=db_path, cluster=cluster, setting={"ps": 2, "worker": 2}, max_steps=1000, quiet=True,
                         checkpoint_every_s=0.3)
        for killer in killers:
            killer.join()
        assert result.stop_reason == "max_steps (1000) reached" and result.iterations == 1000
        assert cluster.lost == frozenset({1, 3, 4}) and cluster.node_pids[3:] == [None, None]
        losses = {node: rest for node, *rest in _rows(db_path, "select node, step, role, cause, action from "
                                                               "node_losses")}
        idle_at, idle, _, idle_action = losses[4]
        step, role, cause, action = losses[3]
        assert (idle, idle_action) == ("idle", "it was not in use; the job went on") and 40 <= idle_at < step
        assert role == "worker" and 120 <= step
        assert cause.startswith("node 3 (127.0.0.1:") and "died during the job with exit code -9" in cause
        assert action == "the job went on as ps2 w1: TDR over the worker(s) left"
        ps_at, ps_role, ps_cause, ps_action = losses[1]
        back = int(re.fullmatch(r"the job went back to its checkpoint at step (\d+) and went on as ps1 w1; "
                                r"(\d+) steps of training lost", ps_action)[1])
        assert ps_role == "ps" and "node 1 (127.0.0.1:" in ps_cause and step < back <= ps_at
        assert f"; {ps_at - back} steps of training lost" in ps_action
        # The worker's switch (an I-a TDR; the idle node's loss switched nothing) is before the checkpoint:
        # its row stays. The rows after the checkpoint went with the training lost, and the job trained on.
        (moved_at, to, types), = _rows(db_path, "select r.step, s.short, r.types from reconfigurations r "
                                                "join settings s on s.id = r.to_setting_id")
        assert moved_at == step and to.startswith("ps2 w1") and types == "I-a"
        assert _rows(db_path, "select count(*), count(distinct step), max(step) from iterations") == [(1000, 1000,
                                                                                                         1000)]
        after = _rows(db_path, f"select count(*), max(worker) from iterations where step > {back}")[0]
        assert after == (1000 - back, 0)  # one worker left, rank 0
        (last,), = _rows(db_path, "select s.short from segments g join settings s on s.id = g.setting_id "
                                  "order by g.segment desc limit 1")
        assert last.startswith("ps1 w1")
        assert main(["report", db_path]) == 0
    assert not set(pids) & node_processes()  # the nodes left are stopped with the cluster
    out = capsys.readouterr().out
    assert "cluster:         5 nodes, 3 lost" in out
    assert f"node lost:       at step {step}: {cause} (a worker node); {action}" in out
    assert f"node lost:       at step {ps_at}: {ps_cause} (a ps node); {ps_action}" in out


def test_a_synchronous_job_that_loses_a_node_trains_on_exactly():
    """QuadraticJob's synchronous step is the same update whatever the worker count, and its variable's blocks
    are updated element by element whatever the ps count: a job that loses a worker mid-step, or a ps node,
    must train on exactly as one that did not. A gradient of the step in flight left in an accumulator would
    change the next update; a ps node's variables come back from the latest checkpoint, and the steps after it
    are trained again.

    The four nodes are the test's own: a lost node cannot simply be restarted in place. A thread of the job
    that lost it stays inside TensorFlow, retrying the node, and keeps the process's gRPC connection to that
    address in its reconnect back-off: a later job's first steps to a node restarted there failed with
    "failed to connect to all addresses ... Connection refused"."""
    from tfonline.cluster import LocalCluster

    losses = {}
    with LocalCluster(4) as cluster, tempfile.TemporaryDirectory() as folder:
        pids = list(cluster.node_pids)
        checkpointed = "select count(*) from checkpoints where step > 30"
        runs = {"whole": ({"ps": 1, "worker": 2}, None),  # node 0 the ps, 1 and 2 the workers, 3 idle
                "worker": ({"ps": 1, "worker": 2},
                           lambda db: after_iterations(db, 40, lambda: os.kill(pids[2], signal.SIGKILL))),
                # nodes 0 and 1 the ps, 3 the worker (2 is lost); without ps node 1: ps node 0, worker node 3
                "ps": ({"ps": 2, "worker": 1},
                       lambda db: after_iterations(db, 1, lambda: os.kill(pids[1], signal.SIGKILL), count=checkpointed))}
        for name, (setting, kill) in runs.items():
            db = os.path.join(folder, f"{name}.db")
            killer = kill(db)[0] if kill else None
            QuadraticJob().run(db=db, cluster=cluster, mode="sync", setting=setting, max_steps=150, quiet=True,
                               checkpoint_every_s=0.2)
            if killer:
                killer.join()
            losses[name] = [loss for loss, in _rows(db, "select loss from iterations order by step")]
            roles = [role for role, in _rows(db, "select role from node_losses")]
            assert roles == ([] if kill is None else [name])
        (action,), = _rows(db, "select action from node_losses")
        assert re.fullmatch(r"the job went back to its checkpoint at step (\d+) and went on as ps1 w1; "
                            r"\d+ steps of training lost", action)
    assert not set(pids) & node_processes()
    assert len(losses["worker"]) == len(losses["ps"]) == len(losses["whole"]) == 150
    assert losses["worker"] == losses["whole"]
    assert losses["ps"] == losses["whole"]
