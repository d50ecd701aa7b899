"""Replay: a recorded job run again with its recorded settings at their recorded steps."""

from __future__ import annotations

import json
import shutil
import sqlite3

import pytest
from jobs import TinyLogR, TunedLogR

from tfonline.cli import main
from tfonline.replay import ReplayError, replay


def _steps(db, job_id):
    """(step, loss, setting id) of every iteration, in order."""
    return sqlite3.connect(db).execute(
        "select step, loss, setting_id from iterations where job_id = ? order by step", (job_id,)).fetchall()


@pytest.fixture(scope="module")
def tuned_sync(cluster, tmp_path_factory):
    """A tuned synchronous job that switched: its repository and id."""
    db = str(tmp_path_factory.mktemp("replay") / "runs.db")
    result = TunedLogR().run(db=db, cluster=cluster, mode="sync", tune=True, quiet=True, checkpoint_every_s=None,
                             tuning={"exploration_budget": None, "random_settings": 3})
    return db, result.job_id


def test_a_tuned_sync_job_is_replayed_bit_for_bit(tuned_sync, cluster, tmp_path):
    db = str(tmp_path / "runs.db")
    shutil.copy(tuned_sync[0], db)
    original = tuned_sync[1]
    comparison = replay(db, original, cluster=cluster)
    assert comparison.switches and all(recorded == replayed for recorded, replayed in comparison.switches)
    assert comparison.exact and comparison.identical_steps == comparison.compared_steps > 1000
    assert _steps(db, comparison.replay) == _steps(db, original)  # each step's loss and setting
    (replay_of,) = sqlite3.connect(db).execute("select replay_of from jobs where id = ?",
                                               (comparison.replay,)).fetchone()
    assert replay_of == original
    assert "exact: the same settings at the same steps and the same loss at every step" in comparison.text()


@pytest.mark.serial  # each live switch within 15 steps of its schedule: a loaded machine made one 52 steps late
def test_an_async_replay_makes_the_same_switches_and_says_why_its_losses_differ(cluster, db_path):
    job = TinyLogR(hash_bits=14, lr=0.3)
    job.target_loss = 1e-6
    schedule = [(100, {"worker": 2}), (200, {"do_function_inlining": False})]
    original = job.run(db=db_path, cluster=cluster, quiet=True, max_steps=300, patience=None, schedule=schedule,
                       setting={"ps": 1, "worker": 1}, checkpoint_every_s=None)
    comparison = replay(db_path, original.job_id, cluster=cluster)
    assert len(comparison.switches) == 2
    for (recorded, replayed), scheduled in zip(comparison.switches, (100, 200)):
        assert scheduled <= recorded < scheduled + 15 and replayed is not None and recorded <= replayed < recorded + 15
    replayed = sqlite3.connect(db_path).execute(
        "select s.knobs from segments g join settings s on s.id = g.setting_id where g.job_id = ? "
        "order by g.segment", (comparison.replay,)).fetchall()
    last = json.loads(replayed[-1][0])
    assert last["worker"] == 2 and last["do_function_inlining"] is False
    # one worker trains alike in both runs until the first switch; two asynchronous workers do not
    assert comparison.first_difference is None or comparison.first_difference > 50
    assert "async mode cannot be exact: workers push their updates in the order they finish" in comparison.text()


def _changed(tuned_sync, tmp_path, sql, params=()):
    db = str(tmp_path / "runs.db")
    shutil.copy(tuned_sync[0], db)
    con = sqlite3.connect(db)
    con.execute(sql, params)
    con.commit()
    con.close()
    return db


@pytest.mark.parametrize("sql, message", [
    ("update jobs set job_class = null", "job {id} was recorded without its class (by tfonline 0.2 or older): "
                                         "it cannot be replayed"),
    ("update jobs set job_class = 'no_such_module_here:Job'",
     "job {id}'s class cannot be made again: cannot import 'no_such_module_here' for the job class "
     "'no_such_module_here:Job': No module named 'no_such_module_here'"),
    ("update jobs set signature = json_set(signature, '$.parameter_bytes', 4)",
     "job {id}'s model changed since it ran: its parameter_bytes was 4, jobs:TunedLogR now gives 16388"),
    ("update settings set knobs = json_set(knobs, '$.batch_size', 32)",
     "job {id} tuned knobs of its own (batch_size): give them as extra_knobs to replay it"),
    ("delete from segments", "job {id} has no recorded segments: it never trained, there is nothing to replay"),
])
def test_what_cannot_be_replayed_is_one_line(tuned_sync, tmp_path, capsys, sql, message):
    db = _changed(tuned_sync, tmp_path, sql)
    before = sqlite3.connect(db).execute("select count(*) from jobs").fetchone()
    assert main(["replay", db, "--job", tuned_sync[1]]) == 1
    assert capsys.readouterr().err.splitlines() == [f"tfonline: error: {message.format(id=tuned_sync[1])}"]
    assert sqlite3.connect(db).execute("select count(*) from jobs").fetchone() == before  # nothing ran


def test_an_unknown_job_is_one_line_naming_the_latest(tuned_sync, capsys):
    db, job_id = tuned_sync
    with pytest.raises(ReplayError, match=f"--job must be a job of '{db}', got 'TunedLogR-nope'; its latest: {job_id}"):
        replay(db, "TunedLogR-nope")


@pytest.mark.fast
def test_the_switches_are_read_from_the_segments_and_an_empty_one_gives_way(tmp_path):
    from tfonline.replay import recorded
    from tfonline.repository import Repository
    from tfonline.setting import setting_key

    a, b, c = {"ps": 1, "worker": 1}, {"ps": 1, "worker": 2}, {"ps": 2, "worker": 1}
    repo = Repository(tmp_path / "runs.db")
    repo.insert("jobs", {"id": "j", "name": "J", "job_class": "jobs:TinyLogR", "attributes": '{"lr": 0.3}',
                         "mode": "sync", "seed": 3, "iterations": 300, "target_loss": 0.5, "node_count": 3})
    for setting in (a, b, c):
        repo.insert("settings", {"id": setting_key(setting), "knobs": json.dumps(setting), "short": ""})
    # a; a again (a segment handed over); b, which ran no iteration; c from the same step; a again
    for segment, (start, setting) in enumerate([(1, a), (60, a), (101, b), (101, c), (201, a)]):
        repo.insert("segments", {"job_id": "j", "segment": segment, "setting_id": setting_key(setting),
                                 "start_step": start})
    repo.flush()
    repo.close()
    got = recorded(tmp_path / "runs.db", "j")
    assert got.start == a and got.switches == [(100, {"ps": 2}), (200, {"ps": 1})]
    assert (got.job_class, got.attributes, got.mode, got.seed, got.iterations) == ("jobs:TinyLogR", {"lr": 0.3},
                                                                                   "sync", 3, 300)


@pytest.mark.fast
def test_the_comparison_says_whether_a_sync_replay_is_exact():
    from tfonline.replay import Comparison

    exact = Comparison("a", "b", "sync", 300, 300, None, 0.0, [(100, 100)])
    assert exact.exact and exact.text().splitlines()[1:] == [
        "  switches: 1, 1 at their recorded step", "  losses: 300 of 300 steps identical",
        "  exact: the same settings at the same steps and the same loss at every step"]
    late = Comparison("a", "b", "sync", 300, 290, 101, 0.25, [(100, 103)])
    assert not late.exact and late.text().splitlines()[1:] == [
        "  switches: 1, 0 at their recorded step (recorded->replayed: 100->103)",
        "  losses: 290 of 300 steps identical; first difference at step 101, largest 0.25",
        "  NOT exact: a synchronous replay should be (is the data, or the machine, another?)"]
    missing = Comparison("a", "b", "async", 300, 120, 121, 0.1, [(100, None)])
    assert "100->none" in missing.text() and not missing.exact
