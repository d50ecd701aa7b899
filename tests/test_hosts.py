"""Jobs across hosts: three network namespaces on a bridge (tests/hosts.py), a ``tfonline node`` in each.

The driver runs here, in this namespace, and finds the nodes through
``TF_CONFIG`` (``run(cluster="TF_CONFIG")``); each node found its place in
the cluster the same way (``tfonline node --tf-config``) and listens on its
own host's address only. Every byte between the nodes and to the driver
crosses the veth pairs and the bridge, as it would cross a network.
"""

from __future__ import annotations

import json
import os
import sqlite3

import pytest
from hosts import Hosts, HostsUnavailable
from jobs import QuadraticJob, TinyLogR



def _alive(pids):
    return {pid for pid in pids if os.path.exists(f"/proc/{pid}")}


@pytest.fixture(scope="module")
def three_hosts():
    """Three hosts with a node each, for this module's jobs; removed after, also on failure."""
    try:
        hosts = Hosts(3).__enter__()
    except HostsUnavailable as e:
        pytest.skip(str(e))
    try:
        hosts.start_nodes()
        yield hosts
    finally:
        hosts.close()


@pytest.fixture
def tf_config(three_hosts, monkeypatch):
    monkeypatch.setenv("TF_CONFIG", three_hosts.tf_config)
    return three_hosts


def _losses(db, job_id):
    return [loss for (loss,) in sqlite3.connect(db).execute(
        "select loss from iterations where job_id = ? order by step", (job_id,))]


def _switches(db, job_id):
    return sqlite3.connect(db).execute("select types, technique from reconfigurations where job_id = ? "
                                       "order by step", (job_id,)).fetchall()


def test_a_fixed_job_trains_across_three_hosts(tf_config, db_path):
    result = TinyLogR().run(setting={"ps": 1, "worker": 2}, db=db_path, cluster="TF_CONFIG", quiet=True)
    assert result.status == "converged"
    (cluster,) = sqlite3.connect(db_path).execute("select cluster from jobs where id = ?",
                                                  (result.job_id,)).fetchone()
    assert json.loads(cluster) == tf_config.node_addresses()  # chief first: the order of TF_CONFIG
    workers = {w for (w,) in sqlite3.connect(db_path).execute(
        "select distinct worker from iterations where job_id = ?", (result.job_id,))}
    assert workers == {0, 1}  # both workers, on hosts 1 and 2, trained


def test_parameter_servers_move_between_hosts_in_sync_mode_exactly_as_no_switch(tf_config, db_path):
    """ODMR across hosts: the 512 KB weights whole on host 0, then cut over hosts 0 and 1, then whole again;
    a synchronous job's losses are those of the run without switches, bit for bit."""
    job = TinyLogR(hash_bits=17)
    job.target_loss = 1e-6  # not reached: both run 120 steps
    start = {"ps": 1, "worker": 1}
    plain = job.run(setting=start, db=db_path, cluster="TF_CONFIG", mode="sync", max_steps=120, quiet=True)
    switched = job.run(setting=start, db=db_path, cluster="TF_CONFIG", mode="sync", max_steps=120, quiet=True,
                       schedule=[(40, {"ps": 2}), (80, {"ps": 1})])
    assert _switches(db_path, switched.job_id) == [("I-b", "odmr+tdr")] * 2
    assert _losses(db_path, switched.job_id) == _losses(db_path, plain.job_id)


def test_workers_join_and_leave_across_hosts_in_sync_mode_exactly_as_no_switch(tf_config, db_path):
    """TDR across hosts: 1 worker, then 2 (hosts 1 and 2), then 1 with 2 ps; the gradient does not depend on
    the data, so each synchronous step is the same update whatever the workers."""
    start = {"ps": 1, "worker": 1}
    plain = QuadraticJob().run(setting=start, db=db_path, cluster="TF_CONFIG", mode="sync", max_steps=60,
                               quiet=True)
    switched = QuadraticJob().run(setting=start, db=db_path, cluster="TF_CONFIG", mode="sync", max_steps=60,
                                  quiet=True, schedule=[(20, {"worker": 2}), (40, {"ps": 2, "worker": 1})])
    assert [technique for _, technique in _switches(db_path, switched.job_id)] == ["tdr", "odmr+tdr"]
    assert _losses(db_path, switched.job_id) == _losses(db_path, plain.job_id)


def test_a_tuned_asynchronous_job_switches_layouts_across_hosts(tf_config, db_path):
    """The tuner's switches (random settings, then its own choices) change ps and workers over the hosts, and
    thread pools too: each host's node serves new ones when asked (type II switches)."""
    from jobs import TunedLogR

    tuning = {"initial_iterations": 20, "random_settings": 3, "segment_iterations": 40, "min_segment_s": 0,
              "exploration_budget": None, "resume": False}
    result = TunedLogR().run(setting={"ps": 2, "worker": 1}, db=db_path, cluster="TF_CONFIG", tune=True,
                             tuning=tuning, quiet=True)
    assert result.status == "converged"
    conn = sqlite3.connect(db_path)
    layouts = {(json.loads(k)["ps"], json.loads(k)["worker"]) for (k,) in conn.execute(
        "select s.knobs from segments g join settings s on s.id = g.setting_id where g.job_id = ?",
        (result.job_id,))}
    assert len(layouts) >= 2 and all(ps + worker <= 3 for ps, worker in layouts)
    switches = _switches(db_path, result.job_id)
    assert any("odmr" in t or "tdr" in t for _, t in switches) and any("II" in types for types, _ in switches)


def test_the_harness_leaves_nothing_behind_even_when_the_body_fails():
    hosts = Hosts(2, rate="100mbit")
    try:
        with hosts:
            pids = {hosts.start(i, ["sleep", "600"]).pid for i in range(2)}
            assert _alive(pids) == pids and len(hosts.leftovers()) == 2 * 2 + 1  # the control: all made
            raise RuntimeError("the test body fails")
    except HostsUnavailable as e:
        pytest.skip(str(e))
    except RuntimeError as e:
        assert str(e) == "the test body fails"
    assert hosts.leftovers() == [] and _alive(pids) == set()


def test_the_multihost_benchmark_compares_fixed_settings_with_the_tuned_job():
    """benchmarks/multihost.py's tables (its runs need root and minutes: `python benchmarks/multihost.py`)."""
    import importlib.util
    import sys

    path = os.path.join(os.path.dirname(__file__), os.pardir, "benchmarks", "multihost.py")
    spec = importlib.util.spec_from_file_location("multihost_benchmark", path)
    multihost = importlib.util.module_from_spec(spec)
    path_before = list(sys.path)
    try:
        spec.loader.exec_module(multihost)
    finally:
        sys.path[:] = path_before  # it puts benchmarks/ and tests/ first, as a script does
    assert multihost.layouts(3) == [{"ps": 1, "worker": 1}, {"ps": 1, "worker": 2}, {"ps": 2, "worker": 1}]
    assert list(multihost.fixed_settings(3, 0)) == ["ps1 w1", "ps1 w2", "ps2 w1"]
    drawn = multihost.fixed_settings(4, 5)  # the paper's protocol: from the whole knob space, threads too
    assert len(drawn) == 5 and all(s["ps"] + s["worker"] <= 4 for s in drawn.values())
    assert drawn == multihost.fixed_settings(4, 5)  # the same draw each time
    assert len({s["intra_op_parallelism_threads"] for s in drawn.values()}) == 2  # both pools of this 2-core driver
    assert len({s["global_jit_level"] for s in drawn.values()}) > 1
    fixed = {"ps1 w1": {"status": "converged", "completion_time_s": 100.0},
             "ps1 w2": {"status": "converged", "completion_time_s": 60.0},
             "ps2 w1": {"status": "max_seconds", "completion_time_s": 95.0}}  # not converged: counts at the cap
    summary = multihost.summarise(fixed, {"status": "converged", "completion_time_s": 80.0}, cap=140.0)
    assert summary["best"] == "ps1 w2" and summary["worst_s"] == 140.0 and summary["average_s"] == 100.0
    assert summary["tuned_over_best"] == pytest.approx(80 / 60) and summary["average_over_tuned"] == 1.25
    assert summary["captured"] == pytest.approx((100 - 80) / (100 - 60))  # half the way from average to best
    text = multihost.markdown({"date": "d", "hosts": 3, "rate": "1gbit", "workload": "cnn", "cap_s": 140.0, "random": 3,
                               "fixed": {k: dict(v, iterations=1) for k, v in fixed.items()},
                               "tuned": {"status": "converged", "completion_time_s": 80.0}, "summary": summary})
    assert "tfonline / best: 1.33x (target <= 1.1x)" in text and "captured: 50% (target >= 90%)" in text
    assert "R = 3 fixed settings drawn from the whole knob space (seed 2026)" in text
