"""The trained model kept: a job's final checkpoint and its metrics, on a real cluster."""

from __future__ import annotations

import glob
import logging
import os
import sqlite3
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from jobs import TinyLogR, WideMLP
from tfonline.cli import main
from tfonline.data import hashed_sparse_dataset

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "examples"))
from cnn import CNN  # noqa: E402


def test_the_restored_cnn_gives_the_test_accuracy_the_clusters_parameters_gave(cluster, db_path, capsys):
    """Two ps nodes, so the CNN's largest layer (fc1) is cut in two blocks; the checkpoint joins them."""
    job = CNN()
    result = job.run(setting={"ps": 2, "worker": 1}, db=db_path, cluster=cluster, max_steps=150, patience=None,
                     quiet=True, checkpoint_every_s=1.0)
    assert result.status == "converged" or result.iterations == 150
    accuracy = result.metrics["accuracy"]  # measured on a node, on the parameters where they lived
    assert accuracy > 0.5  # a trained model: chance is 0.1
    reader = tf.train.load_checkpoint(result.checkpoint)
    shapes = reader.get_variable_to_shape_map()
    assert shapes["fc1"] == [3136, 256] and shapes["fc1/Momentum"] == [3136, 256]
    assert not [name for name in shapes if "part_" in name or name.startswith("tfonline")]
    assert reader.get_tensor("global_step") == result.iterations
    with job.restore(result) as model:
        restored = model.evaluate()
    assert restored["accuracy"] == pytest.approx(accuracy, abs=1e-9)  # 1,000 digits: one more right is 0.001
    assert restored["loss"] == pytest.approx(result.metrics["loss"], rel=1e-5)
    con = sqlite3.connect(db_path)
    rows = con.execute("select metric, value from evaluations where job_id = ? and step = ?",
                       (result.job_id, result.iterations)).fetchall()
    assert dict(rows) == pytest.approx(result.metrics)
    written = con.execute("select step, path, kind from checkpoints where job_id = ? order by step",
                          (result.job_id,)).fetchall()
    assert written[-1] == (result.iterations, result.checkpoint, "final") and len(written) >= 2  # and periodic ones
    measured = [step for step, in con.execute("select distinct step from evaluations where metric = 'accuracy' "
                                              "order by step")]
    # one at every checkpoint, as the training reached it (the workers train on while a checkpoint is written;
    # one that began as the job ended shares the final one's step and parameters)
    steps = [step for step, _, _ in written]
    assert measured[-1] == result.iterations
    assert all(any(w <= m <= after for m in measured) for w, after in zip(steps, steps[1:] + steps[-1:])), (
        measured, steps)
    assert main(["report", db_path, "--html", os.path.join(os.path.dirname(db_path), "report.html")]) == 0
    out = capsys.readouterr().out
    assert f"evaluated:       accuracy {accuracy:.4g}, loss" in out, out
    assert "workload:        8 variables, 3.27 MB (largest 3.06 MB, cut across the ps nodes)" in out, out
    assert f"model:           {result.checkpoint} (step {result.iterations}; {len(written)} checkpoints written)" in out
    with open(os.path.join(os.path.dirname(db_path), "report.html")) as f:
        page = f.read()
    assert "Metrics on held-out data, at each checkpoint and the end" in page and f"accuracy {accuracy:.4g}" in page


def test_a_job_starts_from_the_same_weights_under_every_setting(cluster, tmp_path):
    """One worker reads the same batches under every setting, so one start gives the same losses: the wide
    layer is whole on one ps node and cut in two blocks on two. Another seed is another start."""
    def losses(ps, seed=0):
        db = str(tmp_path / f"ps{ps}-seed{seed}.db")
        result = WideMLP().run(setting={"ps": ps, "worker": 1}, db=db, cluster=cluster, seed=seed, max_steps=4,
                               patience=None, quiet=True)
        with sqlite3.connect(db) as con:
            return [loss for loss, in con.execute("select loss from iterations where job_id = ? order by step",
                                                  (result.job_id,))]

    whole, cut, other = losses(1), losses(2), losses(1, seed=1)
    assert len(whole) == len(cut) == 4
    assert cut == pytest.approx(whole, rel=1e-5)
    assert abs(other[0] - whole[0]) > 1e-3 * whole[0]


class EvaluatedLogR(TinyLogR):
    """TinyLogR with held-out batches; its metric is the loss. Its bias is a ``tf.Variable``."""

    def eval_input_fn(self):
        return hashed_sparse_dataset(0, 1, batch_size=50, fields=8, categories_per_field=50, hash_bits=self.hash_bits,
                                     signal=3.0, num_batches=7, seed=99)


def test_a_sync_jobs_checkpoint_is_beside_its_repository_whole_and_without_accumulators(cluster, db_path):
    job = EvaluatedLogR(hash_bits=17)  # w is 512 KiB: a block per ps node
    result = job.run(setting={"ps": 2, "worker": 1}, mode="sync", db=db_path, cluster=cluster, max_steps=60,
                     patience=None, quiet=True)
    directory = os.path.join(os.path.dirname(db_path), "runs.models", result.job_id)
    assert result.checkpoint == os.path.join(directory, f"model.ckpt-{result.iterations}")
    reader = tf.train.load_checkpoint(result.checkpoint)
    assert reader.get_variable_to_shape_map() == {"w": [1 << 17, 1], "w/Adagrad": [1 << 17, 1], "b": [],
                                                  "b/Adagrad": [], "global_step": []}
    assert np.count_nonzero(reader.get_tensor("w")) > 100  # trained rows, in both blocks
    assert np.count_nonzero(reader.get_tensor("w")[1 << 16:]) > 0 and np.count_nonzero(reader.get_tensor("w")[:1 << 16])
    with job.restore(directory) as model:
        assert model.evaluate()["loss"] == pytest.approx(result.metrics["loss"], rel=1e-6)
    con = sqlite3.connect(db_path)
    assert con.execute("select model_dir from jobs where id = ?", (result.job_id,)).fetchone() == (directory,)


def test_a_job_killed_mid_training_resumes_from_its_latest_checkpoint_as_the_same_job(db_path, cluster, capsys):
    """SIGKILL of the driver (no handler runs), then run(resume=True) on the same repository."""
    from conftest import node_processes
    from test_processes import _start_driver, _stderr, _wait_gone

    driver = _start_driver(db_path, 100_000, 0.3)  # TinyLogR, never converging; a checkpoint every 0.3 s
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert driver.poll() is None, _stderr(driver)
            saved, last = _latest(db_path)
            if len(saved) >= 3 and last - saved[-1] >= 50:  # as many as keep_checkpoints: all three on disk
                break
            time.sleep(0.2)
        nodes = node_processes(driver.pid)
        driver.kill()
        driver.wait()
    finally:
        driver.kill()
    assert _wait_gone(nodes) == set()
    saved, last = _latest(db_path)  # what the killed driver committed
    con = sqlite3.connect(db_path)
    (job_id, started_at), = con.execute("select id, started_at from jobs").fetchall()
    losses = dict(con.execute("select step, loss from iterations").fetchall())

    job = TinyLogR()
    job.target_loss = 1e-6
    result = job.run(db=db_path, cluster=cluster, quiet=True, patience=None, resume=True, max_steps=saved[-1] + 300)

    assert (result.job_id, result.status, result.iterations) == (job_id, "stopped", saved[-1] + 300)
    assert con.execute("select count(*), min(started_at) from jobs").fetchone() == (1, started_at)  # one job
    (step, lost, gap), = con.execute("select step, lost_steps, gap_s from resumes").fetchall()
    assert (step, lost) == (saved[-1], last - saved[-1]) and gap > 0
    steps = [s for s, in con.execute("select step from iterations order by step")]
    assert steps == list(range(1, result.iterations + 1))  # the lost steps were trained again, once
    spans = con.execute("select start_step, end_step, ended_at from segments order by start_step").fetchall()
    assert spans[0][0] == 1 and spans[-1][1] == result.iterations and all(ended for _, _, ended in spans)
    assert all(end + 1 == start for (_, end, _), (start, _, _) in zip(spans, spans[1:]))  # no overlap, no hole
    # It went on from the checkpoint's parameters, not from a new model's zeros (whose loss is ln 2 = 0.693 on
    # every batch at first): one loss has a standard deviation of about 0.09 here, a mean of 10 about 0.03, a
    # mean of 100 about 0.01.
    after = dict(con.execute("select step, loss from iterations where step > ?", (saved[-1],)).fetchall())
    assert losses[1] == pytest.approx(np.log(2)) and np.mean([after[saved[-1] + k] for k in range(1, 11)]) < 0.62
    before, resumed = (np.mean([table[s] for s in range(first, first + 100)]) for table, first in (
        (losses, saved[-1] - 99), (after, saved[-1] + 1)))
    assert abs(resumed - before) < 0.1, (before, resumed)
    assert tf.train.load_checkpoint(result.checkpoint).get_tensor("global_step") == result.iterations
    assert os.path.dirname(result.checkpoint) == con.execute("select model_dir from jobs").fetchone()[0]
    kept = glob.glob(os.path.join(os.path.dirname(result.checkpoint), "*.index"))
    assert len(kept) == 3 and result.checkpoint + ".index" in kept  # keep_checkpoints: the killed run's count too
    assert main(["report", db_path]) == 0
    out = capsys.readouterr().out
    assert f"resumed:         at step {saved[-1]}, {last - saved[-1]} iterations lost, after a gap of" in out, out
    assert f"(step {result.iterations}; {len(saved) + 1} checkpoints written)" in out, out  # the kept ones, the final


def _latest(db_path) -> tuple[list[int], int]:
    """The steps of the checkpoints written so far, and the last step recorded."""
    try:
        con = sqlite3.connect(db_path, timeout=5)
        saved = [s for s, in con.execute("select step from checkpoints order by step")]
        return saved, con.execute("select coalesce(max(step), 0) from iterations").fetchone()[0]
    except sqlite3.OperationalError:  # not created yet
        return [], 0


def test_resume_starts_afresh_when_the_latest_run_ended_well(db_path, cluster, caplog):
    with caplog.at_level(logging.INFO, logger="tfonline"):
        first = TinyLogR().run(db=db_path, cluster=cluster, quiet=True, resume=True)  # nothing to resume
        second = TinyLogR().run(db=db_path, cluster=cluster, quiet=True, resume=True)
    assert first.status == second.status == "converged" and first.job_id != second.job_id
    assert "resume=True: no earlier run of TinyLogR here; starting afresh" in caplog.text
    assert f"the latest run of TinyLogR ({first.job_id}) is converged; starting afresh" in caplog.text


def test_a_resumed_tuned_job_goes_on_on_its_checkpoints_setting_with_its_tuners_knowledge(db_path, cluster, caplog):
    """The first run ends at max_steps and is then marked interrupted, as a crash after its last checkpoint
    would leave it; the resumed run starts on the setting it had, and its tuner, holding the triples the first
    run measured, skips its random phase (one random setting asked for: two triples are enough)."""
    from jobs import TunedLogR

    tuning = {"random_settings": 1, "min_segment_s": 0.5}
    job = TunedLogR()
    job.target_loss = 1e-6  # both runs end at max_steps
    first = job.run(db=db_path, cluster=cluster, quiet=True, tune=True, tuning=tuning, max_steps=1500, patience=None)
    con = sqlite3.connect(db_path)
    assert con.execute("select count(*) from triples").fetchone()[0] >= 2  # what the tuner knows
    assert con.execute("select count(*) from decisions where phase = 'random'").fetchone()[0] >= 1
    con.execute("update jobs set status = 'interrupted'")
    con.commit()
    (saved_setting,) = con.execute("select setting_id from checkpoints where step = 1500").fetchone()

    with caplog.at_level(logging.WARNING, logger="tfonline"):
        resumed = job.run(db=db_path, cluster=cluster, quiet=True, tune=True, tuning=tuning, max_steps=1800,
                          patience=None, resume=True, setting={"ps": 2, "worker": 1})
    assert f"resuming {first.job_id} on its checkpoint's setting" in caplog.text  # not the one given
    assert resumed.job_id == first.job_id and resumed.iterations == 1800
    (on,) = con.execute("select setting_id from segments where start_step = 1501").fetchone()
    assert on == saved_setting
    assert con.execute("select count(*) from decisions where step > 1500 and phase = 'random'").fetchone() == (0,)
