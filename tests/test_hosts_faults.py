"""Faults across hosts (tests/hosts.py): a worker's host loses its link mid-job, and the job goes on.

Each test has hosts of its own (the fault leaves one of them useless). The
driver runs here and finds the nodes through ``TF_CONFIG``; host 0's node is
the parameter server, hosts 1 and 2 the workers.
"""

from __future__ import annotations

import os
import sqlite3

import pytest
from conftest import after_iterations
from hosts import Hosts, HostsUnavailable
from jobs import TunedLogR

from tfonline.cli import main


def _rows(db, sql):
    return sqlite3.connect(db).execute(sql).fetchall()


@pytest.fixture
def hosts(monkeypatch):
    """Three hosts with a node each, TF_CONFIG naming them; removed after, also on failure."""
    try:
        made = Hosts(3).__enter__()
    except HostsUnavailable as e:
        pytest.skip(str(e))
    try:
        monkeypatch.setenv("TF_CONFIG", made.start_nodes())
        yield made
    finally:
        pids = [node.pid for node in made.nodes]
        made.close()
        assert made.leftovers() == []
        assert [pid for pid in pids if os.path.exists(f"/proc/{pid}")] == []


# Segments of at least 6 s: the first decision comes after the cut has been dealt with (a node lost during a
# switch sends the job back to its latest checkpoint, tests/test_lost_nodes.py's case: not this test's).
TUNING = {"initial_iterations": 20, "random_settings": 2, "segment_iterations": 40, "min_segment_s": 6,
          "exploration_budget": None, "resume": False}


def test_a_tuned_job_loses_a_worker_host_and_converges_on_the_hosts_left(hosts, db_path, capsys):
    """Host 2's link cut mid-job: its node runs on, unreachable, and a step waiting on it never returns. It is
    detected, left behind, and the tuner proposes no setting that needs three nodes after it. (A node killed
    outright is tests/test_lost_nodes.py's case.)"""
    job = TunedLogR()
    thread, _ = after_iterations(db_path, 50, lambda: hosts.cut(2))
    result = job.run(setting={"ps": 1, "worker": 2}, db=db_path, cluster="TF_CONFIG", tune=True, tuning=TUNING,
                     quiet=True)
    thread.join()
    assert result.status == "converged"
    (step, node, role, cause, action), = _rows(db_path, "select step, node, role, cause, action from node_losses")
    assert node == 2 and cause.startswith(f"node 2 ({hosts.addresses[2]}:2222) stopped answering during the job")
    assert role == "worker" and action == "the job went on as ps1 w1: TDR over the worker(s) left"
    later = [(ps, worker) for ps, worker in _rows(
        db_path, "select json_extract(s.knobs, '$.ps'), json_extract(s.knobs, '$.worker') from segments g "
                 f"join settings s on s.id = g.setting_id where g.start_step > {step}")]
    assert later and all(ps + worker <= 2 for ps, worker in later)
    assert main(["report", db_path]) == 0
    assert f"node lost:       at step {step}: {cause} (a {role} node); {action}" in capsys.readouterr().out
