"""A planned drain: a node of ``tfonline node`` asked to leave (SIGUSR1) is moved off without loss, then stops."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys

import numpy as np
import pytest
from conftest import after_iterations
from jobs import CounterJob

from tfonline import _control
from tfonline.cli import main
from tfonline.cluster import free_port
from tfonline.exceptions import ClusterError
from tfonline.given_cluster import ExistingCluster


class LongCounter(CounterJob):
    """CounterJob with room for 10,000 pushes before its loss reaches 0."""

    def model_fn(self, features, labels):
        return super().model_fn(features, labels) + 9000.0


def _node(addresses, index, drain_s):
    return subprocess.Popen([sys.executable, "-m", "tfonline.cli", "node", "--cluster", ",".join(addresses),
                             "--index", str(index), "--cores", "3", "--drain-s", str(drain_s)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _events(node) -> tuple[list[dict], str]:
    """The node's stdout lines after its first, once it has stopped, and its stderr."""
    out, err = node.communicate(timeout=30)
    return [json.loads(line) for line in out.splitlines()], err


def test_a_node_that_leaves_is_moved_off_without_loss_and_stops(db_path, monkeypatch):
    """Four nodes, ps2 w1 (ps nodes 0 and 1, worker node 2, node 3 idle). Node 1, a ps, is asked to leave at
    step 60: ODMR moves its block of the counter and TDR the worker, to ps2 w1 on nodes 0, 2 and 3. Then node 3,
    the worker now, once node 1 has left: ps1 w1 on nodes 0 and 2. Each is released once the job is off it, and
    stops.

    CounterJob's loss says how many pushes the counter holds: nothing may be lost or counted twice. The nodes
    offer 3 cores each (this host has 2): the default thread pools are theirs.

    After the job: while a driver holds nodes 0 and 2, another driver's job is refused them, and node 2, asked
    to leave, is not released: it stops at its deadline. Held by no one, node 0 stops at once."""
    addresses = [f"127.0.0.1:{free_port()}" for _ in range(4)]
    nodes = [_node(addresses, i, 1 if i == 2 else 30) for i in range(4)]
    try:
        for node in nodes:
            assert json.loads(node.stdout.readline())["event"] == "serving"
        left = "select count(*) from node_losses"
        killers = [after_iterations(db_path, 60, lambda: os.kill(nodes[1].pid, signal.SIGUSR1))[0],
                   after_iterations(db_path, 1, lambda: os.kill(nodes[3].pid, signal.SIGUSR1), count=left)[0]]
        result = LongCounter().run(db=db_path, cluster=addresses, setting={"ps": 2, "worker": 1}, max_steps=2000,
                                   quiet=True)
        for killer in killers:
            killer.join()
        assert result.iterations == 2000 and result.stop_reason == "max_steps (2000) reached"
        for i in (1, 3):  # released: each stopped on its own, exit code 0
            assert _events(nodes[i])[0] == [{"event": "leaving", "drain_s": 30}, {"event": "left", "released": True}]
            assert nodes[i].returncode == 0
        conn = sqlite3.connect(db_path)
        rows = conn.execute("select node, step, role, cause, action from node_losses order by step").fetchall()
        assert [(node, role) for node, _, role, _, _ in rows] == [(1, "ps"), (3, "worker")]
        for node, _, _, cause, _ in rows:
            assert cause == f"node {node} ({addresses[node]}) is leaving (a planned drain, 30 s)"
        assert [action for *_, action in rows] == [
            "the job moved off it (ODMR, TDR) and went on as ps2 w1; nothing lost",
            "the job moved off it (ODMR, TDR) and went on as ps1 w1; nothing lost"]
        switches = conn.execute("select r.step, r.technique, s.short from reconfigurations r join settings s "
                                "on s.id = r.to_setting_id order by r.step").fetchall()
        assert [(technique, to.split(" jit")[0]) for _, technique, to in switches] == [("odmr+tdr", "ps2 w1 t3/3"),
                                                                                      ("odmr+tdr", "ps1 w1 t3/3")]
        assert 60 <= switches[0][0] < rows[0][1] <= switches[1][0] < rows[1][1]  # each released after its switch
        # One worker, pushing 1 at a time: the counter read at step k holds the k - 1 pushes before it, through
        # both moves. While a live switch opens, the old worker trains on beside the new one, so a read may see
        # a push of a step recorded after it (half of one, for a counter cut in two blocks); no push is lost or
        # counted twice: the counter is back on count at once, and at the end.
        steps = np.array(conn.execute("select step, loss from iterations order by step").fetchall())
        assert list(steps[:, 0]) == list(range(1, 2001))
        offset = (10000.0 - steps[:, 1]) - (steps[:, 0] - 1)
        off = np.flatnonzero(offset)
        assert len(off) <= 10 and np.all(np.abs(offset) <= 1) and offset[-1] == 0, steps[off]
        assert np.all(offset[off + 1] == 0), steps[off]
        assert nodes[0].poll() is None and nodes[2].poll() is None  # still serving
        held = ExistingCluster(addresses)  # nodes 1 and 3 are gone: it waits for them
        claim = held.claim()
        try:
            assert held.pool == [0, 2]
            monkeypatch.setattr(_control, "TOKEN", _control.TOKEN + 2)  # another driver's
            with pytest.raises(ClusterError, match=rf"^node 0 \({addresses[0]}\) serves another driver's job \(its "
                                                   rf"claim was renewed \d+\.\d s ago\): a given cluster runs one "
                                                   rf"job at a time$"):
                LongCounter().run(db=db_path, cluster=addresses, max_steps=10, quiet=True)
            monkeypatch.undo()
            os.kill(nodes[2].pid, signal.SIGUSR1)  # held, and never released: it stops at its deadline
            events, err = _events(nodes[2])
        finally:
            claim.close()
        assert events == [{"event": "leaving", "drain_s": 1}, {"event": "left", "released": False}]
        assert nodes[2].returncode == 0
        assert "tfonline: warning: node 2: no job moved off it within 1 s; it stops" in err
        os.kill(nodes[0].pid, signal.SIGUSR1)  # held by no job: it stops at once, not in its 30 s
        events, err = _events(nodes[0])
        assert events == [{"event": "leaving", "drain_s": 30}, {"event": "left", "released": False}]
        assert nodes[0].returncode == 0 and "warning" not in err
    finally:
        for node in nodes:
            if node.poll() is None:
                node.terminate()
        for node in nodes:
            node.wait(timeout=30)


@pytest.mark.fast
@pytest.mark.parametrize("option, message", [(["--drain-s", "-1"], "--drain-s must be >= 0, got -1"),
                                             (["--cores", "0"], "--cores must be >= 1, got 0")])
def test_the_node_command_rejects_a_negative_drain_or_no_cores(capsys, option, message):
    assert main(["node", "--cluster", "127.0.0.1:1,127.0.0.1:2", "--index", "0", *option]) == 1
    assert capsys.readouterr().err.strip() == f"tfonline: error: {message}"
