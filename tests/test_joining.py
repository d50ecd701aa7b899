"""A node named in a given cluster that starts serving mid-job joins the job, and a setting can use it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
from conftest import after_iterations
from jobs import TinyLogR

from tfonline.cli import main
from tfonline.cluster import free_port
from tfonline.exceptions import ConfigurationError
from tfonline.given_cluster import JOIN_LOOK_S


def _node(addresses, index):
    return subprocess.Popen([sys.executable, "-m", "tfonline.cli", "node", "--cluster", ",".join(addresses),
                             "--index", str(index)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def test_a_node_that_starts_serving_mid_job_joins_it_and_the_next_setting_uses_it(db_path, capsys):
    """Three nodes named, two serving: the job starts on ps1 w1. Node 2 starts once 40 iterations are in, while
    the worker is held (SIGSTOP) so that the job is still short of step 150 when it joins; the switch scheduled
    there to ps1 w2 needs it. The job runs on to step 1,000: the switch lands a hundred steps or more after 150 (the
    job trains while it is made), and node 2's first step, under load, can take as long as a hundred of node 1's."""
    addresses = [f"127.0.0.1:{free_port()}" for _ in range(3)]
    nodes, served = [_node(addresses, 0), _node(addresses, 1)], []
    try:
        served += [json.loads(node.stdout.readline()) for node in nodes]
        assert [event["event"] for event in served] == ["serving", "serving"]
        with pytest.raises(ConfigurationError, match=r"^the setting's ps \+ worker must be <= the 2 node\(s\) "
                                                     r"serving now \(the others join once they serve\), got ps 1 \+ "
                                                     r"worker 2$"):
            TinyLogR().run(db=db_path, cluster=addresses, setting={"ps": 1, "worker": 2}, quiet=True)

        def start_the_third():
            os.kill(served[1]["pid"], signal.SIGSTOP)  # the worker's server: its port answers, its steps wait
            try:
                nodes.append(_node(addresses, 2))
                assert json.loads(nodes[2].stdout.readline())["event"] == "serving"
                time.sleep(2 * JOIN_LOOK_S)  # the driver looks for it
            finally:
                os.kill(served[1]["pid"], signal.SIGCONT)

        joiner, called = after_iterations(db_path, 40, start_the_third)
        job = TinyLogR()
        job.target_loss = 1e-9
        result = job.run(db=db_path, cluster=addresses, setting={"ps": 1, "worker": 1}, max_steps=1000, quiet=True,
                         schedule=[(150, {"worker": 2})])
        joiner.join()
        assert called and result.iterations == 1000
        conn = sqlite3.connect(db_path)
        (step, node, address), = conn.execute("select step, node, address from node_joins where job_id = ?",
                                              (result.job_id,)).fetchall()
        assert (node, address) == (2, addresses[2]) and 40 <= step < 150
        (moved_at, to), = conn.execute("select r.step, s.short from reconfigurations r join settings s on "
                                       "s.id = r.to_setting_id where r.job_id = ?", (result.job_id,)).fetchall()
        assert moved_at >= 150 and to.startswith("ps1 w2")
        workers = conn.execute("select count(distinct worker) from iterations where job_id = ? and step > ?",
                               (result.job_id, moved_at)).fetchone()
        assert workers == (2,)  # node 2 trains
        assert all(node.poll() is None for node in nodes)  # tfonline leaves nodes it did not start running
        assert main(["report", db_path, "--job", result.job_id]) == 0
    finally:
        with contextlib.suppress(ProcessLookupError, IndexError):  # the server held, should the test end then
            os.kill(served[1]["pid"], signal.SIGCONT)
        for node in nodes:
            node.terminate()
        for node in nodes:
            node.wait(timeout=30)
    out = capsys.readouterr().out
    assert "cluster:         3 nodes, 1 joined" in out
    assert f"node joined:     at step {step}: node 2 ({addresses[2]})" in out
