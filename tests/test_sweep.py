"""Model-selection sweeps: one job class, a grid of its attributes, one job after another on one cluster."""

from __future__ import annotations

import json
import sqlite3
import statistics

import pytest
from jobs import TinyLogR

import tfonline
from tfonline.cli import main
from tfonline.exceptions import ConfigurationError, RepositoryError
from tfonline.sweep import combinations


@pytest.mark.fast
def test_the_grid_is_every_combination_in_order():
    assert combinations({"lr": [0.1, 0.01], "l2": [0, 1]}) == [
        {"lr": 0.1, "l2": 0}, {"lr": 0.1, "l2": 1}, {"lr": 0.01, "l2": 0}, {"lr": 0.01, "l2": 1}]


@pytest.mark.fast
@pytest.mark.parametrize("grid, message", [
    ({"lrate": [0.1]}, "grid names 'lrate', which TinyLogR jobs do not have; they have: .*hash_bits, lr, "),
    ({}, "grid must be a non-empty dict of attribute -> list of values, got {}"),
    ({"lr": 0.1}, "grid values must be non-empty lists, got lr=0.1"),
    ({"lr": []}, r"grid values must be non-empty lists, got lr=\[\]"),
])
def test_a_bad_grid_is_a_one_line_error_before_any_node_starts(grid, message, db_path):
    with pytest.raises(ConfigurationError, match=message):
        tfonline.sweep(TinyLogR, grid, db=db_path, nodes=2)


def test_a_sweep_runs_each_combination_as_a_job_of_the_class_on_one_cluster(cluster, db_path):
    results = tfonline.sweep(TinyLogR, {"lr": [0.5, 0.05]}, db=db_path, cluster=cluster, tune=False, quiet=True)
    assert [r.status for r in results] == ["converged", "converged"] and results[0].job_id != results[1].job_id
    con = sqlite3.connect(db_path)
    names = [n for n, in con.execute("select name from jobs order by started_at")]
    assert names == ["TinyLogR", "TinyLogR"]  # one name: a later job's tuner starts from the earlier ones' triples
    # each ran with its own learning rate: the slower one needs more iterations to the same target
    assert results[1].iterations > 2 * results[0].iterations


def test_each_job_of_a_tuned_sweep_starts_from_the_earlier_ones_and_the_report_says_which(cluster, db_path, capsys):
    """Issue 19's warm start on real jobs: the second job of a sweep (same workload, another learning rate)
    inherits the first's triples at distance 0 and skips its random phase; a job of another name but the
    same workload inherits too; one with 16x the parameters inherits nothing."""
    from jobs import TunedLogR

    tuning = {"initial_iterations": 20, "random_settings": 2, "segment_iterations": 15, "min_segment_s": 0,
              "exploration_budget": None}
    first, second = tfonline.sweep(TunedLogR, {"lr": [0.01, 0.02]}, db=db_path, cluster=cluster, quiet=True,
                                   setting={"ps": 2, "worker": 1}, tuning=tuning)
    namesake = TinyLogR().run(db=db_path, cluster=cluster, quiet=True, tune=True, tuning=tuning, max_steps=60)
    wider = TinyLogR(hash_bits=16).run(db=db_path, cluster=cluster, quiet=True, tune=True, tuning=tuning,
                                       max_steps=60)
    assert main(["report", db_path, "--format", "json"]) == 0
    jobs = {j["id"]: j for j in json.loads(capsys.readouterr().out)["jobs"]}
    con = sqlite3.connect(db_path)

    def learnt(job_id):  # the usable triples a job left (how many depends on its segments' timing)
        return con.execute("select count(*) from triples where job_id = ? and remaining_s is not null",
                           (job_id,)).fetchone()[0]

    assert jobs[first.job_id]["inherited"] == [] and learnt(first.job_id) >= 1
    (source,) = jobs[second.job_id]["inherited"]
    fitted = con.execute("select count(*) from gp_fits where job_id = ?", (first.job_id,)).fetchone()[0] > 0
    assert source == {"job_id": first.job_id, "name": "TunedLogR", "distance": 0.0, "triples": learnt(first.job_id),
                      "gp_fit": int(fitted), "start": 0}  # the GP starts from the first's latest fit; the sweep's
    # setting (ps2 w1), not the first's last one, is where it started: a setting given comes first
    # random_settings 2, shortened by the inherited weight (1 per triple at distance 0): none left from 2 on
    randoms = [d for d in jobs[second.job_id]["decisions"] if d["phase"] == "random"]
    assert len(randoms) <= max(0, 2 - learnt(first.job_id))
    assert ("random" in [p["phase"] for p in jobs[second.job_id]["phases"]]) == (learnt(first.job_id) < 2)
    earlier = [j for j in (first.job_id, second.job_id) if learnt(j)]
    assert sorted(s["job_id"] for s in jobs[namesake.job_id]["inherited"]) == sorted(earlier)
    assert jobs[wider.job_id]["inherited"] == []

    def segment_setting(job_id, order):
        return con.execute(f"select setting_id from segments where job_id = ? order by segment {order} limit 1",
                           (job_id,)).fetchone()[0]

    # The namesake was given no setting: it started on the worker count the latest earlier job that converged
    # ended on, at that job's setting of that count with the lowest median time per iteration over its usable
    # triples (tfonline.tuner.inherit); the setting it ended on itself when that one has none. (TinyLogR has no
    # knobs of its own, so its speed key is its worker count.) Asserting the last setting alone failed when an
    # earlier setting of the same workers had measured faster (make test at 48dc2f8).
    ended = [j for j in (second, first) if j.status == "converged" and j.job_id in earlier][0]
    last = segment_setting(ended.job_id, "desc")

    def workers(setting_id):
        return json.loads(con.execute("select knobs from settings where id = ?", (setting_id,)).fetchone()[0])["worker"]

    times = {}
    for setting_id, per_iteration_s in con.execute("select setting_id, per_iteration_s from triples where job_id = ? "
                                                   "and remaining_s is not null and per_iteration_s is not null",
                                                   (ended.job_id,)):
        if workers(setting_id) == workers(last):
            times.setdefault(setting_id, []).append(per_iteration_s)
    best = min(times, key=lambda s: statistics.median(times[s])) if last in times else last
    assert segment_setting(namesake.job_id, "asc") == best
    assert [s["job_id"] for s in jobs[namesake.job_id]["inherited"] if s["start"]] == [ended.job_id]
    assert main(["report", db_path, "--job", second.job_id]) == 0
    count = learnt(first.job_id)
    assert (f"  inherited:       {count} observation{'s' if count != 1 else ''} from 1 job: {first.job_id} "
            f"(TunedLogR, distance 0.00, {count}{', and its GP fit' if fitted else ''})") in capsys.readouterr().out
    assert main(["report", db_path, "--job", namesake.job_id]) == 0
    assert "; started on its best setting)" in capsys.readouterr().out


@pytest.mark.fast
@pytest.mark.parametrize("argv, message", [
    (["TinyLogR"], "the job class must be module:Class or path/to/file.py:Class, got 'TinyLogR'"),
    (["no_such_module_here:Job"], "cannot import 'no_such_module_here' for the job class 'no_such_module_here:Job': "
                                  "No module named 'no_such_module_here'"),
    (["jobs:Nope"], "the job class 'jobs:Nope' must name an MLJobFramework subclass; 'jobs' has nothing of that name"),
    (["jobs:hashed_sparse_dataset"], "the job class 'jobs:hashed_sparse_dataset' must name an MLJobFramework "
                                     "subclass; 'jobs' has a function"),
    (["missing.py:Job"], "cannot import 'missing.py' for the job class 'missing.py:Job': no such file "),
    (["jobs:TinyLogR", "--grid", "lr"], "--grid must be NAME=V1,V2,... (an attribute and its values), got 'lr'"),
    (["jobs:TinyLogR", "--setting", "[1]"], "--setting must be a JSON object of knobs such as '{\"ps\": 1}', "
                                            "got '[1]'"),
    (["jobs:TinyLogR", "--grid", "lrate=0.1"], "grid names 'lrate', which TinyLogR jobs do not have"),
])
def test_the_sweep_commands_bad_input_is_one_line_before_any_node_starts(argv, message, tmp_path, capsys):
    grid = [] if "--grid" in argv else ["--grid", "lr=0.1"]
    assert main(["sweep", *argv, *grid, "--db", str(tmp_path / "runs.db"), "--nodes", "2"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"tfonline: error: {message}"), err
    assert not (tmp_path / "runs.db").exists()


@pytest.mark.fast
def test_a_job_file_that_fails_as_it_loads_is_one_line(tmp_path, capsys):
    broken = tmp_path / "broken_job.py"
    broken.write_text("raise RuntimeError('no data here')\n")
    assert main(["sweep", f"{broken}:Job", "--grid", "lr=0.1", "--db", str(tmp_path / "runs.db")]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"tfonline: error: importing '{broken}' for the job class '{broken}:Job' failed: RuntimeError: no data here"]


def test_the_sweep_command_runs_a_class_from_a_file(db_path, capsys):
    import os

    path = os.path.join(os.path.dirname(__file__), "jobs.py")
    assert main(["sweep", f"{path}:TinyLogR", "--grid", "lr=0.5,0.05", "--no-tune", "--quiet", "--db", db_path,
                 "--nodes", "3"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 3 and all(": converged in " in line for line in out[:2])
    rows = sqlite3.connect(db_path).execute("select id, name from jobs order by started_at").fetchall()
    assert [name for _, name in rows] == ["TinyLogR", "TinyLogR"]
    assert out[2] == f"tfonline report {db_path} --compare {rows[0][0]} {rows[1][0]}"


@pytest.mark.fast
def test_a_repository_of_another_program_is_one_line_before_any_node_starts(tmp_path):
    other = tmp_path / "theirs.db"
    sqlite3.connect(other).execute("create table notes (text)").connection.commit()
    with pytest.raises(RepositoryError, match=f"db must be a tfonline repository or a new file, got {str(other)!r}: "
                                              r"a SQLite file with other tables \(notes\); tfonline leaves it as it is"):
        tfonline.sweep(TinyLogR, {"lr": [0.5]}, db=str(other), nodes=2)
    assert sqlite3.connect(other).execute("select name from sqlite_master").fetchall() == [("notes",)]  # untouched
