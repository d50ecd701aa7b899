"""Every process tfonline starts, it stops: on signals, on SIGKILL of the driver, and for given clusters."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
from conftest import node_processes
from jobs import TinyLogR
from test_security import listening

from tfonline import given_cluster
from tfonline.cli import main
from tfonline.cluster import free_port
from tfonline.exceptions import ConfigurationError

HERE = os.path.dirname(__file__)


def _start_driver(db_path, *args, stderr_path=None):
    """The driver, its stderr to a file: a pipe nobody reads fills up, and a driver writing to it blocks for good."""
    env = dict(os.environ, PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
    stderr_path = stderr_path or db_path + ".stderr"
    with open(stderr_path, "wb") as stderr:
        driver = subprocess.Popen([sys.executable, os.path.join(HERE, "driver.py"), db_path, *map(str, args)],
                                  env=env, stdout=subprocess.DEVNULL, stderr=stderr)
    driver.stderr_path = stderr_path
    return driver


def _stderr(driver) -> str:
    with open(driver.stderr_path, errors="replace") as f:
        return f.read()[-3000:]


def _wait_exit(driver, timeout_s=60) -> int:
    """The driver's exit code; if it hangs, its threads' stacks (tests/driver.py dumps them on SIGUSR1) in the failure."""
    try:
        return driver.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        driver.send_signal(signal.SIGUSR1)
        time.sleep(2)
        raise AssertionError(f"the driver did not exit within {timeout_s} s; its stderr:\n{_stderr(driver)}") from None


def _iterations(db_path) -> int:
    try:
        return sqlite3.connect(db_path, timeout=5).execute("select count(*) from iterations").fetchone()[0]
    except sqlite3.OperationalError:  # not created yet
        return 0


def _wait_for_training(driver, db_path, at_least=30, timeout_s=120) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert driver.poll() is None, _stderr(driver)
        n = _iterations(db_path)
        if n >= at_least:
            return n
        time.sleep(0.2)
    raise AssertionError(f"the driver did not train {at_least} iterations within {timeout_s} s")


def _wait_gone(pids, timeout_s=15.0) -> set[int]:
    deadline = time.monotonic() + timeout_s
    alive = set(pids)
    while alive and time.monotonic() < deadline:
        alive &= node_processes()
        time.sleep(0.1)
    return alive


@pytest.mark.parametrize("signals", [[signal.SIGTERM], [signal.SIGINT], [signal.SIGTERM, signal.SIGTERM]],
                         ids=["SIGTERM", "SIGINT", "SIGTERM-during-clean-up"])
def test_signal_to_the_driver_stops_every_node(db_path, signals):
    """The third case interrupts the clean-up itself: the steps after the one interrupted still run."""
    driver = _start_driver(db_path)
    try:
        _wait_for_training(driver, db_path)
        nodes = node_processes(driver.pid)
        assert len(nodes) >= 3  # the fork server and the two nodes it forked
        for i, signum in enumerate(signals):
            time.sleep(0.3 * i)
            driver.send_signal(signum)
        assert _wait_exit(driver) != 0
        assert _wait_gone(nodes) == set()
    finally:
        driver.kill()
        driver.wait()
    con = sqlite3.connect(db_path)
    (status,), = con.execute("select status from jobs").fetchall()
    assert status == "interrupted"
    if len(signals) == 1:  # what it trained is kept for run(resume=True)
        (kind, path), = con.execute("select kind, path from checkpoints").fetchall()
        assert kind == "interrupted" and os.path.exists(path + ".index")


def test_sigkill_of_the_driver_keeps_committed_rows_and_no_node(db_path, cluster, capsys):
    driver = _start_driver(db_path)
    try:
        committed = _wait_for_training(driver, db_path, at_least=100)
        nodes = node_processes(driver.pid)
        assert len(nodes) >= 3  # the fork server and its two nodes, alive before the kill
        driver.kill()  # SIGKILL: no handler, no finally
        driver.wait()
    finally:
        driver.kill()
    assert _wait_gone(nodes) == set()  # the nodes saw their stdin close
    conn = sqlite3.connect(db_path)
    assert conn.execute("pragma integrity_check").fetchone() == ("ok",)
    rows = conn.execute("select step, loss, exec_time_s from iterations order by step").fetchall()
    assert len(rows) >= committed
    assert [r[0] for r in rows] == list(range(1, len(rows) + 1))
    assert all(r[1] is not None and r[2] > 0 for r in rows)
    (status, pid, started, beat), = conn.execute("select status, driver_pid, started_at, heartbeat_at from jobs")
    assert status == "running" and pid == driver.pid and beat >= started  # it never got to say otherwise
    # The report tells what happened...
    assert main(["report", db_path, "--format", "json"]) == 0
    (job,) = json.loads(capsys.readouterr().out)["jobs"]
    assert (job["status"], job["stop_reason"]) == ("interrupted", "interrupted (driver gone)")
    # ... and the next job on the file records it.
    assert TinyLogR().run(db=db_path, cluster=cluster, quiet=True).status == "converged"
    (killed, _), (_, status) = conn.execute("select stop_reason, status from jobs order by started_at").fetchall()
    assert (killed, status) == ("interrupted (driver gone)", "converged")


def test_two_drivers_on_one_new_repository_both_finish_with_every_row(tmp_path):
    db_path = str(tmp_path / "shared.db")
    drivers = [_start_driver(db_path, 300, stderr_path=str(tmp_path / f"driver{i}.stderr")) for i in range(2)]
    try:
        codes = [_wait_exit(driver, timeout_s=180) for driver in drivers]
    finally:
        for driver in drivers:
            driver.kill()
    assert codes == [0, 0], [_stderr(d) for d in drivers]
    conn = sqlite3.connect(db_path)
    jobs = conn.execute("select id, status, iterations from jobs").fetchall()
    assert [(status, n) for _, status, n in jobs] == [("stopped", 300), ("stopped", 300)]
    for job_id, _, n in jobs:
        steps = [s for (s,) in conn.execute("select step from iterations where job_id = ? order by step", (job_id,))]
        assert steps == list(range(1, n + 1))


def test_job_on_nodes_started_by_tfonline_node(db_path, monkeypatch):
    addresses = [f"127.0.0.1:{free_port()}" for _ in range(2)]
    monkeypatch.setattr(given_cluster, "PUBLISH_GRACE_S", 1.0)  # both have said they serve: node 1 will not publish
    # Loopback by default, and when asked; node 1 keeps its thread pools, so the cluster's stay fixed.
    bind = [[], ["--bind", "127.0.0.1", "--fixed-threads"]]
    nodes = [
        subprocess.Popen([sys.executable, "-m", "tfonline.cli", "node", "--cluster", ",".join(addresses),
                          "--index", str(i), *bind[i]], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        for i in range(2)
    ]
    try:
        for i, node in enumerate(nodes):
            served = json.loads(node.stdout.readline())
            assert served["task_index"] == i and served["target"] == "grpc://" + addresses[i]
            assert listening(served["pid"]) == [("127.0.0.1", int(addresses[i].rsplit(":", 1)[1]))]
        result = TinyLogR().run(db=db_path, cluster=addresses, quiet=True)
        assert result.status == "converged"
        assert all(node.poll() is None for node in nodes)  # tfonline leaves nodes it did not start running
        cluster, = sqlite3.connect(db_path).execute("select cluster from jobs").fetchone()
        assert json.loads(cluster) == addresses
        with pytest.raises(ConfigurationError, match=r"thread knobs of a given cluster are fixed at (\d+)/\1 "
                                                     r"\(intra/inter\); got 1/1 for node 0"):
            TinyLogR().run(db=db_path, cluster=addresses, quiet=True,
                           setting={"intra_op_parallelism_threads": 1, "inter_op_parallelism_threads": 1})
    finally:
        for node in nodes:
            node.terminate()
        for node in nodes:
            node.wait(timeout=30)
    assert [node.returncode for node in nodes] == [0, 0]


def test_node_command_rejects_a_bad_index():
    out = subprocess.run([sys.executable, "-m", "tfonline.cli", "node", "--cluster", "127.0.0.1:1,127.0.0.1:2",
                          "--index", "5"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert out.stderr.strip() == "tfonline: error: --index must be in [0, 1] for 2 addresses, got 5"


def test_given_cluster_that_does_not_answer(db_path):
    from tfonline.exceptions import ClusterError

    dead = [f"127.0.0.1:{free_port()}" for _ in range(2)]
    with pytest.raises(ClusterError, match="cluster nodes must be serving, but nothing answers at 127.0.0.1:"):
        TinyLogR().run(db=db_path, cluster=dead, quiet=True)
    (status,), = sqlite3.connect(db_path).execute("select status from jobs").fetchall()
    assert status == "failed"


def test_embedded_cluster_is_stopped_when_the_job_fails(db_path):
    from test_training import Diverging

    from tfonline.exceptions import TfOnlineError

    before = node_processes(os.getpid())
    with pytest.raises(TfOnlineError, match="training diverged"):
        Diverging().run(db=db_path, nodes=2, quiet=True)
    assert _wait_gone(node_processes(os.getpid()) - before, timeout_s=5) == set()
    assert node_processes(os.getpid()) <= before
