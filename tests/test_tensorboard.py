"""TensorBoard event files of a job: live from run(tensorboard=...), and from the repository by the report;
read back, and through the real TensorBoard server's HTTP API."""

from __future__ import annotations

import glob
import json
import os
import sqlite3
import subprocess
import sys
import time
import urllib.request

import pytest
import tensorflow as tf
from test_model import EvaluatedLogR

from tfonline.cli import main
from tfonline.cluster import LOOPBACK, free_port
from tfonline.exceptions import ConfigurationError

SCALARS = {"loss", "smoothed_loss", "seconds_per_iteration", "setting/ps", "setting/worker", "switch/cost_s",
           "eval/loss"}


def _events(run_dir: str) -> tuple[dict[str, dict[int, float]], dict[str, list[tuple[int, str]]]]:
    """The scalars (tag -> step -> value) and the texts (tag -> [(step, text)]) of a run's event files."""
    scalars, texts = {}, {}
    for path in sorted(glob.glob(os.path.join(run_dir, "events.out.tfevents.*"))):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.HasField("simple_value"):
                    scalars.setdefault(value.tag, {})[event.step] = value.simple_value
                elif value.metadata.plugin_data.plugin_name == "text":
                    texts.setdefault(value.tag, []).append((event.step, tf.make_ndarray(value.tensor).item().decode()))
    return scalars, texts


@pytest.fixture(scope="module")
def switched(cluster, tmp_path_factory):
    """A job with a switch (a schedule: 1 worker, then 2) and held-out metrics, with live TensorBoard events."""
    folder = tmp_path_factory.mktemp("tensorboard")
    db, live = str(folder / "runs.db"), str(folder / "live")
    job = EvaluatedLogR()
    job.target_loss = 1e-6  # never reached: 400 steps, the switch at step 150
    result = job.run(db=db, cluster=cluster, quiet=True, setting={"ps": 1, "worker": 1}, max_steps=400, patience=None,
                     schedule=[(150, {"worker": 2})], tensorboard=live)
    return result, db, live, folder


def test_a_job_writes_its_history_as_tensorboard_events_while_it_trains(switched):
    result, db, live, _ = switched
    scalars, texts = _events(os.path.join(live, result.job_id))
    assert SCALARS <= set(scalars)
    con = sqlite3.connect(db)
    losses = dict(con.execute("select step, loss from iterations where job_id = ?", (result.job_id,)).fetchall())
    assert set(scalars["loss"]) == set(losses)  # a short job: every iteration
    assert all(scalars["loss"][step] == pytest.approx(loss, rel=1e-6) for step, loss in losses.items())
    (step, cost), = con.execute("select step, cost_s from reconfigurations").fetchall()
    assert scalars["switch/cost_s"] == {step: pytest.approx(cost, rel=1e-6)}
    assert [s for s, _ in texts["switch"]] == [step] and "-> ps1 w2" in texts["switch"][0][1]
    assert scalars["setting/worker"][1] == 1.0 and max(scalars["setting/worker"].values()) == 2.0
    assert scalars["eval/loss"] == {result.iterations: pytest.approx(result.metrics["loss"], rel=1e-6)}
    assert texts["setting"][0][0] == 1 and texts["setting"][0][1].startswith("ps1 w1")


def test_the_report_writes_the_same_events_from_the_repository_and_tensorboard_serves_them(switched, capsys):
    result, db, live, folder = switched
    after = str(folder / "after")
    assert main(["report", db, "--tensorboard", after]) == 0
    assert f"tensorboard: 1 run in {after}" in capsys.readouterr().err
    written, _ = _events(os.path.join(after, result.job_id))
    seen, _ = _events(os.path.join(live, result.job_id))
    assert set(written) == set(seen) and written["loss"] == seen["loss"] and written["eval/loss"] == seen["eval/loss"]

    port = free_port()
    server = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "tensorboard"), "--logdir", after,
                               "--host", LOOPBACK, "--port", str(port), "--load_fast", "false"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        url = f"http://{LOOPBACK}:{port}/data/plugin/scalars/scalars?run={result.job_id}&tag=loss"
        points, deadline = [], time.monotonic() + 90
        while not points and time.monotonic() < deadline:
            assert server.poll() is None, server.stderr.read().decode()[-2000:]
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    points = json.loads(response.read())
            except OSError:  # not serving yet, or the run not loaded yet
                time.sleep(0.5)
        # [wall time, step, value] each: TensorBoard keeps a sample of 1,000 per tag (all 400 here)
        assert {step: value for _, step, value in points} == pytest.approx(written["loss"])
        wall = dict(sqlite3.connect(db).execute("select step, wall_time from iterations").fetchall())
        assert all(w == pytest.approx(wall[step], abs=1e-3) for w, step, _ in points)  # each row's own time
    finally:
        server.kill()
        server.wait()


def test_a_tensorboard_folder_that_cannot_be_written_is_a_one_line_error(tmp_path, db_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigurationError, match=r"tensorboard must be a writable directory, got '.*file/logs': "
                                                 "Not a directory"):
        EvaluatedLogR().run(db=db_path, tensorboard=str(blocker / "logs"), quiet=True)
    with pytest.raises(ConfigurationError, match="tensorboard must be a directory path or None, got int"):
        EvaluatedLogR().run(db=db_path, tensorboard=3, quiet=True)
