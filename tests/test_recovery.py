"""What the job does without a lost node (tfonline._recovery.Recovery.judge), on every kind of loss.

The jobs that lose real nodes are in tests/test_lost_nodes.py, tests/test_training.py and
tests/test_hosts_faults.py; here the judgement alone, on layouts the cluster tests cannot all reach (a node
lost while a switch is made or its variables move, too few nodes for any ps and worker).
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from tfonline._graph import Layout
from tfonline._recovery import Recovery
from tfonline.exceptions import NodeFailedError

pytestmark = pytest.mark.fast  # no TensorFlow cluster


def _recovery(setting, pool, in_transition=False, checkpoint=None, moved_from=()):
    """A Recovery of a job on ``setting`` over the nodes ``pool``; ``checkpoint`` (step) its latest one; in a
    transition, the moved variables come from the nodes ``moved_from``."""
    engine = SimpleNamespace(layout=Layout.from_setting(setting, pool), cluster=SimpleNamespace(pool=list(pool)),
                             layout_of=lambda s: Layout.from_setting(s, pool))
    keeper = SimpleNamespace(latest=None, latest_saved=None)
    if checkpoint is not None:
        keeper.latest, keeper.latest_saved = f"model.ckpt-{checkpoint}", {"step": checkpoint}
    moving = [SimpleNamespace(sources=[SimpleNamespace(device=f"/job:node/task:{node}/device:CPU:0")])
              for node in moved_from]
    backend = SimpleNamespace(in_transition=in_transition, moving=moving)
    return Recovery(engine, backend, recorder=None, knobs={}, keeper=keeper)


def _lost(node):
    return NodeFailedError(f"node {node} (127.0.0.1:1) died during the job with exit code -9", node)


def test_an_idle_node_changes_nothing():
    lost = _recovery({"ps": 1, "worker": 1}, [0, 1, 2]).judge(_lost(2), {"ps": 1, "worker": 1})
    assert (lost.role, lost.new, lost.action) == ("idle", None, "it was not in use; the job went on")


def test_a_worker_is_left_behind_by_tdr():
    lost = _recovery({"ps": 1, "worker": 2}, [0, 1, 2]).judge(_lost(1), {"ps": 1, "worker": 2})
    assert (lost.role, lost.rank, lost.new, lost.back) == ("worker", 0, {"ps": 1, "worker": 1}, None)
    assert lost.action == "the job went on as ps1 w1: TDR over the worker(s) left"


@pytest.mark.parametrize("setting, pool, node, new", [
    ({"ps": 2, "worker": 1}, [0, 1, 2, 3], 1, {"ps": 2, "worker": 1}),  # an idle node is left to take its place
    ({"ps": 2, "worker": 2}, [0, 1, 2, 3], 0, {"ps": 1, "worker": 2}),  # one ps fewer
    ({"ps": 1, "worker": 2}, [0, 1, 2], 0, {"ps": 1, "worker": 1}),  # the last ps: one worker fewer
])
def test_a_ps_node_sends_the_job_back_to_its_checkpoint_on_the_nodes_left(setting, pool, node, new):
    lost = _recovery(setting, pool, checkpoint=120).judge(_lost(node), setting)
    assert (lost.role, lost.new, lost.back.step, lost.back.path) == ("ps", new, 120, "model.ckpt-120")
    assert lost.action == f"the job went back to its checkpoint at step 120 and went on as ps{new['ps']} w{new['worker']}"


def test_a_ps_node_lost_before_any_checkpoint_sends_the_job_back_to_its_start():
    lost = _recovery({"ps": 1, "worker": 2}, [0, 1, 2]).judge(_lost(0), {"ps": 1, "worker": 2})
    assert (lost.back.step, lost.back.path, lost.back.saved) == (0, None, None)
    assert lost.action == "the job went back to its start (no checkpoint yet) and went on as ps1 w1"


@pytest.mark.parametrize("setting, pool, node, moved_from, role, new", [
    ({"ps": 1, "worker": 2}, [0, 1, 2], 2, [0], "worker", {"ps": 1, "worker": 1}),  # even a worker: back
    ({"ps": 2, "worker": 1}, [0, 1, 2, 3], 0, [0], "ps", {"ps": 2, "worker": 1}),  # node 3 takes its place
    ({"ps": 1, "worker": 1}, [0, 1, 2, 3], 3, [3, 2], "ps", {"ps": 1, "worker": 1}),  # a moved block's source
])
def test_a_node_lost_while_variables_move_sends_the_job_back_to_its_checkpoint(setting, pool, node, moved_from,
                                                                               role, new):
    """In an ODMR transition a step may be creating a moved variable: from a node that the new layout leaves
    idle too."""
    lost = _recovery(setting, pool, in_transition=True, checkpoint=50, moved_from=moved_from).judge(
        _lost(node), setting)
    assert (lost.role, lost.new, lost.back.step, lost.paused) == (role, new, 50, False)
    assert lost.action == ("lost during the move of variables to their new nodes; the job went back to its "
                           f"checkpoint at step 50 and went on as ps{new['ps']} w{new['worker']}")
    idle = _recovery(setting, pool, in_transition=True, moved_from=moved_from).judge(_lost(9), setting)
    assert (idle.role, idle.new) == ("idle", None)  # neither used nor a source


@pytest.mark.parametrize("node, role", [
    (0, "ps"),  # a ps of both settings
    (1, "worker"),  # the old worker, a ps of the new setting: its old role
    (2, "ps"),  # idle before, a ps of the new setting
    (3, "worker"),  # idle before, the new setting's worker
])
def test_a_node_lost_while_a_switch_is_made_sends_the_job_back_to_its_checkpoint_on_the_new_setting(node, role):
    """ps1 w1 -> ps3 w1 on four nodes (node 0 the ps, 1 the worker -> nodes 0-2 the ps, 3 the worker): the
    job goes on with the new setting, one ps fewer, on the three left."""
    from tfonline._switcher import FailedSwitch
    from tfonline.setting import resolve_setting

    old, target = resolve_setting({"ps": 1, "worker": 1}, 4, 2), resolve_setting({"ps": 3, "worker": 1}, 4, 2)
    error = FailedSwitch("during the switch", _lost(node))
    lost = _recovery(old, [0, 1, 2, 3], checkpoint=80).judge_switch(error, old, target)
    assert (lost.node, lost.role, lost.old, lost.paused, lost.back.step) == (node, role, old, True, 80)
    assert lost.new == dict(target, ps=2)
    assert lost.cause == f"node {node} (127.0.0.1:1) died during the job with exit code -9"  # the node's own
    assert re.fullmatch(r"lost during the switch from ps1 w1 \S.* to ps3 w1 \S.*; the job went back to its "
                        r"checkpoint at step 80 and went on as ps2 w1", lost.action), lost.action


@pytest.mark.parametrize("setting, pool, node, transition, message", [
    ({"ps": 1, "worker": 1}, [0, 1], 1, False, "; it was the job's only worker"),
    ({"ps": 1, "worker": 1}, [0, 1], 0, False, "; no node is left for both a ps and a worker"),
    ({"ps": 1, "worker": 1}, [0, 1], 1, True, "; no node is left for both a ps and a worker"),
])
def test_a_loss_the_job_cannot_go_on_from_fails_it_naming_the_node_and_why(setting, pool, node, transition, message):
    with pytest.raises(NodeFailedError) as raised:
        _recovery(setting, pool, in_transition=transition, checkpoint=50).judge(_lost(node), setting)
    assert str(raised.value) == f"node {node} (127.0.0.1:1) died during the job with exit code -9{message}"
    assert raised.value.node_index == node


def test_nodes_that_leave_are_taken_out_of_the_pool_and_the_job_is_moved_off_them_by_odmr_and_tdr(caplog):
    """ps2 w1 on nodes 0-3 (node 3 idle); nodes 3 (idle) and 1 (a ps) say they leave. Two nodes are left, too
    few for ps2 w1: the switch off them is to ps1 w1 on nodes 0 and 2, by ODMR and TDR, losing nothing."""
    from tfonline.setting import knob_table, resolve_setting

    setting = resolve_setting({"ps": 2, "worker": 1}, 4, 2)
    recovery = _recovery(setting, [0, 1, 2, 3])
    lost = []
    recovery.engine.cluster.addresses = [f"127.0.0.1:{n}" for n in range(4)]
    recovery.engine.cluster.lose = lambda node: (lost.append(node), recovery.engine.cluster.pool.remove(node))
    recovery.knobs = knob_table(4, 2)
    recovery.claim = SimpleNamespace(leaving=lambda: {3: 30, 1: 30})
    switch = recovery.leaving(setting)
    assert lost == [3, 1] and recovery.engine.cluster.pool == [0, 2]
    idle, ps = recovery.departing
    assert (idle.node, idle.role, idle.new, idle.action) == (3, "idle", None, "it was not in use; the job went on")
    assert switch is ps and (ps.node, ps.role, ps.new) == (1, "ps", dict(setting, ps=1))
    assert ps.cause == "node 1 (127.0.0.1:1) is leaving (a planned drain, 30 s)"
    assert ps.action == "the job moved off it (ODMR, TDR) and went on as ps1 w1; nothing lost"
    assert ps.plan.technique == "odmr+tdr" and ps.plan.types == ("I-a", "I-b")
    # The same setting on other nodes is a switch too: ODMR and TDR move what the layout puts elsewhere.
    recovery.departing = []
    recovery.engine.cluster.pool[:] = [0, 1, 2, 3]
    recovery.claim = SimpleNamespace(leaving=lambda: {0: 5})
    switch = recovery.leaving(setting)
    assert (switch.new, switch.plan.technique) == (setting, "odmr+tdr")
    # A node the job cannot do without is let be: its loss, at its deadline, fails the job then.
    two = _recovery(resolve_setting({"ps": 1, "worker": 1}, 4, 2), [0, 1])
    two.engine.cluster.addresses = ["127.0.0.1:0", "127.0.0.1:1"]
    two.claim = SimpleNamespace(leaving=lambda: {1: 30})
    assert two.leaving(resolve_setting({"ps": 1, "worker": 1}, 4, 2)) is None and two.departing == []
    assert caplog.messages[-1] == ("node 1 (127.0.0.1:1) is leaving (a planned drain, 30 s), but without it no ps "
                                   "and worker are left: the job goes on with it")


def test_a_node_that_left_is_recorded_and_released_and_one_that_does_not_answer_is_named(caplog):
    from tfonline._recovery import Lost

    setting = {"ps": 1, "worker": 1}
    recovery = _recovery(setting, [0, 1, 2, 3])
    recovery.engine.cluster.addresses = [f"127.0.0.1:{n}" for n in range(4)]
    recovery.engine.let_go = lambda node: None
    rows, released = [], []

    def release(node):
        released.append(node)
        if node == 3:
            raise RuntimeError("no channel")
        return node != 2

    recovery.recorder = SimpleNamespace(node_lost=lambda **row: rows.append(row))
    recovery.claim = SimpleNamespace(release=release)
    recovery.departing = [Lost(node, "idle", None, f"node {node} is leaving", setting, None, None, drained=True)
                          for node in (1, 2, 3)]
    recovery.close(step=40)  # the job ends: each is released, whatever the others do
    assert released == [1, 2, 3] and recovery.departing == []
    assert [(row["node"], row["step"], row["action"]) for row in rows] == [
        (node, 40, "it was not in use; the job went on") for node in (1, 2, 3)]
    assert caplog.messages[-3:] == [
        "node 2 (127.0.0.1:2) does not answer its release: it stops at its own deadline",
        "node 3 (127.0.0.1:3) left at step 40: node 3 is leaving; it was not in use; the job went on",
        "node 3 could not be released: RuntimeError: no channel"]
