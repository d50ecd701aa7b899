"""The full benchmark's speed check: a sitting on another machine defers a workload, and ``--redo`` runs it again."""

from __future__ import annotations

import os
import sqlite3
import sys

import pytest

from test_bench import BENCH, _bench_module, journal, paper  # noqa: F401 (the fixtures, shared)

pytestmark = pytest.mark.fast  # no TensorFlow cluster

FULL = {"mode": "full", "workloads": "logr,svm", "fixed": 30, "seeds": 5, "draw_seed": 2026}
FAST = {"time_per_iteration_s": 0.0015, "iterations": 30000}
SLOW = {"time_per_iteration_s": 0.0040, "iterations": 12000}


@pytest.fixture(scope="module")
def speed():
    return _bench_module("speed")


def test_a_check_within_the_tolerance_is_the_same_machine_and_one_beyond_it_either_way_is_not(speed):
    reference = dict(FAST, sitting=3)
    assert speed.verdict("svm", None, SLOW) is None  # the first check: the reference
    for ratio in (1 / speed.TOLERANCE, 1 + speed.MEASURED_NOISE, speed.TOLERANCE):
        assert speed.verdict("svm", reference, {"time_per_iteration_s": 0.0015 * ratio}) is None
    assert speed.verdict("svm", reference, SLOW) == ("svm's speed check expected 1.500 ms per iteration within "
                                                     "1.25x (sitting 3's), got 4.000 ms (2.67x): another machine")
    assert "(0.50x)" in speed.verdict("svm", reference, {"time_per_iteration_s": 0.00075})
    assert 1 + 2 * speed.MEASURED_NOISE <= speed.TOLERANCE  # the tolerance clears one machine's noise twice over


def test_speed_checks_and_a_redo_are_kept_across_sittings(journal, tmp_path):
    path = str(tmp_path / "2026-11-29-full-runs.jsonl")
    book = journal.Journal.start(path, FULL)
    book.begin_sitting(revision="abc1234")
    book.record_speed("svm", FAST)
    book.record("svm/tuned/0", {"status": "converged", "job_id": "t0"}, traces={"curve": [1]})
    book.record("logr/tuned/0", {"status": "converged", "job_id": "l0"})
    again = journal.Journal.resume(path, FULL)
    again.begin_sitting(revision="abc1234")
    again.record_speed("svm", SLOW, deferred=True)
    assert again.reference_speed("svm") == dict(FAST, speed="svm", sitting=1)  # a deferred check is no reference
    third = journal.Journal.resume(path, FULL)
    third.begin_sitting(revision="abc1234")
    assert [c["sitting"] for c in third.speeds["svm"]] == [1, 2] and third.traces == {"svm/tuned/0": {"curve": [1]}}
    assert third.redo("svm") == [{"status": "converged", "job_id": "t0"}]
    third.record_speed("svm", SLOW)
    fourth = journal.Journal.resume(path, FULL)
    assert set(fourth.runs) == {"logr/tuned/0"} and fourth.traces == {} and fourth.redone == {"svm": [3]}
    assert fourth.reference_speed("svm") == dict(SLOW, speed="svm", sitting=3)  # the redone workload's own


def test_a_workload_s_first_run_in_a_sitting_checks_its_speed_once_and_an_off_check_defers_it(journal, paper,
                                                                                              tmp_path):
    book = journal.Journal.start(str(tmp_path / "j-runs.jsonl"), FULL)
    book.begin_sitting()
    book.record("svm/tuned/0", {"completion_time_s": 60.0})
    book.record_speed("svm", FAST)
    checks, said = [], []
    measured = {"logr": FAST, "svm": SLOW}
    kept = paper.Kept(book, said.append, check=lambda name: checks.append(name) or measured[name])
    assert kept("svm/tuned/0", lambda: {"completion_time_s": 1.0}) == {"completion_time_s": 60.0}
    assert checks == []  # a kept run needs no check
    assert kept("logr/tuned/0", lambda: {"completion_time_s": 1.0}) == {"completion_time_s": 1.0}
    assert kept("logr/tuned/1", lambda: {"completion_time_s": 2.0}) == {"completion_time_s": 2.0}
    assert checks == ["logr"] and "    speed        1.500 ms/it  logr, the reference" in said
    with pytest.raises(paper._Deferred) as deferred:
        kept("svm/tuned/1", lambda: pytest.fail("a deferred workload runs nothing"))
    assert str(deferred.value).startswith("svm's speed check expected 1.500 ms per iteration")
    assert "    speed        4.000 ms/it  svm, 2.67x sitting 1's" in said
    lines = journal.Journal.resume(book.path, FULL).speeds
    assert [c.get("deferred", False) for c in lines["svm"]] == [False, True] and len(lines["logr"]) == 1


def test_a_check_that_fails_checks_nothing_and_the_run_goes_on(journal, paper, tmp_path):
    book = journal.Journal.start(str(tmp_path / "j-runs.jsonl"), FULL)

    def broken(name):
        raise ValueError("the speed check of svm expected iterations after start-up, got 0")

    said = []
    kept = paper.Kept(book, said.append, check=broken)
    assert kept("svm/tuned/0", lambda: {"completion_time_s": 1.0}) == {"completion_time_s": 1.0}
    assert said == ["    no speed check of svm: ValueError: the speed check of svm expected iterations after "
                    "start-up, got 0"]
    simulated = paper.Kept(book, said.append, check=lambda name: None)  # paper-sim has no speed to check
    assert simulated("paper-sim/all", lambda: {"workloads": 1}) == {"workloads": 1} and len(said) == 1
    assert book.speeds == {}


def test_forgetting_jobs_removes_their_rows_everywhere_and_keeps_the_repository_again(journal, tmp_path):
    db = str(tmp_path / "tuned.db")
    with sqlite3.connect(db) as conn:
        conn.execute("create table jobs (id text, name text)")
        conn.execute("create table triples (job_id text, step integer)")
        conn.executemany("insert into jobs values (?, ?)", [("l0", "LogR"), ("s0", "SVM"), ("s1", "SVM")])
        conn.executemany("insert into triples values (?, ?)", [("l0", 1), ("s0", 1), ("s1", 1), ("s1", 2)])
    conn.close()
    journal.keep(db)
    journal.forget(db, ["s0", "s1"])
    os.remove(db + ".kept")  # another machine: the SQL text is what it has
    assert journal.restore(db)
    with sqlite3.connect(db) as conn:
        assert conn.execute("select id from jobs").fetchall() == [("l0",)]
        assert conn.execute("select job_id from triples").fetchall() == [("l0",)]
    conn.close()


def _sitting(paper, monkeypatch, tmp_path, measured, argv=(), written=None):
    """One full-mode sitting of logr and svm, whose runs are a row each (no cluster): what it returns and logs.
    ``written``: a list that gets the speed checks each write of the tables saw."""
    monkeypatch.setattr(paper.speed, "measure", lambda name, mode: measured[name])
    monkeypatch.setattr(paper, "_machine", lambda: {"nodes": 4})
    for made in ("draw", "markdown"):  # the tables and figures of workloads that ran nothing
        monkeypatch.setattr(paper, made, lambda *args: [])
    monkeypatch.setattr(paper, "_write", lambda result, stem, book: (written if written is not None else []).append(
        {name: [c["sitting"] for c in checks] for name, checks in book.speeds.items()}))

    def real(name, mode, seeds, drawn, tuned_db, fixed_db, log, kept):
        return {"tuned": [kept(f"{name}/tuned/0", lambda: {"status": "converged", "job_id": f"{name}-job"},
                               keeps=tuned_db)],
                "fixed": [kept(f"{name}/fixed/0", lambda: {"status": "converged", "job_id": f"{name}-fixed"})]}

    monkeypatch.setattr(paper, "_real", real)
    monkeypatch.setattr(sys, "argv", [BENCH])
    return paper.main(["--mode", "full", "--workloads", "logr,svm", "--out", str(tmp_path), "--resume", *argv])


def test_a_sitting_on_another_machine_defers_the_workload_and_redo_runs_it_again_whole(journal, paper, tmp_path,
                                                                                        monkeypatch, capsys):
    stem = tmp_path / "2026-11-29-full"
    book = journal.Journal.start(f"{stem}{journal.SUFFIX}", FULL)
    book.begin_sitting()
    book.record_speed("svm", FAST)
    book.record("svm/fixed/0", {"status": "converged", "completion_time_s": 75.0})
    book.end_sitting("stopped after 1 min")
    assert _sitting(paper, monkeypatch, tmp_path, {"logr": SLOW, "svm": SLOW}) == paper.UNFINISHED
    out = capsys.readouterr().out
    assert "svm deferred: svm's speed check expected 1.500 ms per iteration" in out
    assert "deferred svm (another machine): 3 runs kept" in out and "--redo svm" in out
    after = journal.Journal.resume(f"{stem}{journal.SUFFIX}", FULL)
    assert set(after.runs) == {"logr/tuned/0", "logr/fixed/0", "svm/fixed/0"}  # logr ran here; svm ran nothing
    assert _sitting(paper, monkeypatch, tmp_path, {"logr": SLOW, "svm": SLOW}, ["--redo", "svm"]) == 0
    out = capsys.readouterr().out
    assert "svm runs again whole" in out and "done:" in out
    done = journal.Journal.resume(f"{stem}{journal.SUFFIX}", FULL)
    assert done.runs["svm/tuned/0"] == {"status": "converged", "job_id": "svm-job"}
    assert done.runs["svm/fixed/0"] == {"status": "converged", "job_id": "svm-fixed"}  # run again, not the kept one
    assert done.reference_speed("svm")["sitting"] == 3 and done.redone == {"svm": [3]}
    said = paper._speed_checks({"speeds": done.speeds, "redone": done.redone})
    assert "- svm: sitting 3 4.000 ms" in said and "- logr: sitting 2 4.000 ms" in said


@pytest.mark.parametrize("argv, said", [
    (["--redo", "svm"], "--redo takes effect with --resume (a new benchmark runs every workload), got no --resume"),
    (["--resume", "--redo", "cnn"], "--redo takes workloads of this benchmark (logr, svm), or a real one's tuned "
                                    "runs alone (NAME/tuned), got 'cnn'"),
    (["--resume", "--redo", "svm/fixed"], "--redo takes workloads of this benchmark (logr, svm), or a real one's "
                                          "tuned runs alone (NAME/tuned), got 'svm/fixed'"),
])
def test_redo_refuses_bad_input_in_one_line(paper, argv, said, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", [BENCH])
    with pytest.raises(SystemExit) as exited:
        paper.main(["--mode", "full", "--workloads", "logr,svm", "--out", str(tmp_path), *argv])
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"paper.py: error: {said}"
    assert os.listdir(tmp_path) == []  # refused before any journal


def test_redo_of_a_workload_s_tuned_runs_sets_aside_those_that_tune_and_keeps_its_fixed_runs_and_checks(journal,
                                                                                                        tmp_path):
    book = journal.Journal.start(str(tmp_path / "2026-11-29-full-runs.jsonl"), FULL)
    book.begin_sitting()
    book.record_speed("svm", FAST)
    for key in ("svm/tuned/0", "svm/checkpoint", "svm/start", "svm/fixed/0", "logr/tuned/0"):
        book.record(key, {"job_id": key}, traces={"curve": [key]})
    again = journal.Journal.resume(book.path, FULL)
    again.begin_sitting()
    assert again.redo("svm/tuned") == [{"job_id": "svm/tuned/0"}, {"job_id": "svm/checkpoint"}]
    third = journal.Journal.resume(book.path, FULL)
    assert set(third.runs) == set(third.traces) == {"svm/start", "svm/fixed/0", "logr/tuned/0"}
    assert third.reference_speed("svm") == dict(FAST, speed="svm", sitting=1) and third.redone == {"svm/tuned": [2]}


def test_a_sitting_that_redoes_the_tuned_runs_runs_them_again_and_keeps_the_fixed_ones(journal, paper, tmp_path,
                                                                                       monkeypatch, capsys):
    book = journal.Journal.start(f"{tmp_path / '2026-11-29-full'}{journal.SUFFIX}", FULL)
    book.begin_sitting()
    book.record_speed("svm", FAST)
    for key in ("svm/tuned/0", "svm/fixed/0", "logr/tuned/0"):
        book.record(key, {"status": "converged", "job_id": key})
    book.end_sitting("stopped after 1 min")
    assert _sitting(paper, monkeypatch, tmp_path, {"logr": FAST, "svm": FAST},
                    ["--redo", "svm/tuned", "--accept-lost"]) == 0
    assert "; svm/tuned runs again\n" in capsys.readouterr().out
    done = journal.Journal.resume(book.path, FULL)
    assert done.runs["svm/tuned/0"]["job_id"] == "svm-job"  # run again in sitting 2
    kept = (done.runs["svm/fixed/0"]["job_id"], done.runs["logr/tuned/0"]["job_id"])
    assert kept == ("svm/fixed/0", "logr/tuned/0")  # from sitting 1
    assert [c["sitting"] for c in done.speeds["svm"]] == [1, 2]  # the checks stay: the same machine's
    said = paper._speed_checks({"speeds": done.speeds, "redone": done.redone})
    assert ("- svm's tuned runs and checkpoint-restart run ran again from sitting 2 on (`--redo svm/tuned`): its "
            "earlier ones are set aside") in said


def test_a_sitting_that_stops_writes_the_tables_with_its_own_speed_checks(journal, paper, tmp_path, monkeypatch):
    book = journal.Journal.start(f"{tmp_path / '2026-11-29-full'}{journal.SUFFIX}", FULL)
    book.begin_sitting()
    for key in ("logr/tuned/0", "logr/fixed/0"):
        book.record(key, {"status": "converged", "job_id": key})
    book.end_sitting("stopped after 1 min")
    written = []
    assert _sitting(paper, monkeypatch, tmp_path, {"logr": FAST, "svm": FAST}, ["--stop-after", "0", "--accept-lost"],
                    written) == paper.UNFINISHED  # logr kept whole; one run of svm's, then no more
    assert written == [{}, {"svm": [2]}]  # after logr, and at the stop: with sitting 2's check of svm
    book = journal.Journal.start(f"{tmp_path / '2026-11-30-full'}{journal.SUFFIX}", FULL)
    book.begin_sitting()
    book.end_sitting("stopped after 1 min")
    written.clear()
    assert _sitting(paper, monkeypatch, tmp_path, {"logr": FAST, "svm": FAST}, ["--stop-after", "0"],
                    written) == paper.UNFINISHED
    assert written == []  # no workload done: no tables yet


def test_a_runs_machine_load_is_the_share_of_cpu_time_stolen_idle_and_taken_by_other_processes(speed, tmp_path):
    """Two /proc/stat samples 10 s apart on 2 cores at 100 ticks a second (2,000 ticks): 1,300 busy at the default
    priority, of which this process and its children took 10 s (1,000 ticks), 100 at a lower one, 100 stolen,
    500 idle."""
    stat = tmp_path / "stat"
    stat.write_text("cpu  1000 0 500 9000 100 0 0 50 0 0\ncpu0 1 2 3 4 5 6 7 8\n")
    ticks, own_s = speed.machine_sample(str(stat))
    assert ticks == [1000, 0, 500, 9000, 100, 0, 0, 50] and own_s >= 0
    tick_s = 1.0 / os.sysconf("SC_CLK_TCK")
    before = ([1000, 0, 500, 9000, 100, 0, 0, 50], 5.0)
    after = ([2000, 100, 800, 9400, 200, 0, 0, 150], 5.0 + 1000 * tick_s)
    load = speed.machine_load(before, after)
    assert load["steal"] == pytest.approx(100 / 2000) and load["idle"] == pytest.approx(500 / 2000)
    assert load["others"] == pytest.approx((1300 - 1000) / 2000) and load["niced"] == pytest.approx(100 / 2000)
    # this process busier than the machine's busy ticks (their rounding): no one else, not a negative share
    assert speed.machine_load(before, (after[0], 5.0 + 5000 * tick_s))["others"] == 0.0
    assert speed.machine_load(before, None) is None and speed.machine_load(before, before) is None
    assert speed.machine_sample(str(tmp_path / "missing")) is None
    (tmp_path / "odd").write_text("cpu  1 2 three\n")
    assert speed.machine_sample(str(tmp_path / "odd")) is None


def test_the_tables_list_the_runs_that_shared_their_machine(paper, tmp_path, capsys, monkeypatch):
    """The runs record what else the machine did (:func:`speed.machine_load`); the tables say the most stolen and
    the most taken by other processes, per workload, and name the runs over 5% of either."""
    from test_bench import TIMES, _fake_fixed, _row

    loads = iter([{"steal": 0.01, "idle": 0.1, "others": 0.02}, {"steal": 0.0, "idle": 0.1, "others": 0.31},
                  {"steal": 0.08, "idle": 0.1, "others": 0.0}])  # the tuned runs', then the checkpoint-restart one's
    monkeypatch.setattr(paper, "_run", lambda *args, **kwargs: dict(_row("converged", 100.0), machine=next(loads)))
    monkeypatch.setattr(paper, "_fixed", _fake_fixed(paper, TIMES, []))
    monkeypatch.setattr(paper, "_machine", lambda: {"cores": 2, "memory_gib": 24, "platform": "p", "python": "3.11",
                                                     "tensorflow": "2", "nodes": 4})  # no TensorFlow import
    monkeypatch.setattr(paper, "draw_settings", lambda space, count, seed: [{"x": 1}, {"x": 2}])
    monkeypatch.setattr(paper.speed, "measure", lambda name, mode: {
        "time_per_iteration_s": 0.003, "iterations": 100, "machine": {"steal": 0.12, "idle": 0.0, "others": 0.0}})
    monkeypatch.setattr(sys, "argv", [BENCH])
    assert paper.main(["--mode", "full", "--workloads", "logr", "--fixed", "2", "--seeds", "2",
                       "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    text = next(tmp_path.glob("*-full.md")).read_text()
    assert ("- logr: 3 of 7 runs recorded; at most 8.0% stolen, 31.0% taken by other processes (0.0% by ones at a "
            "lower priority); over 5%: tuned 1 (0% stolen, 31% others'), checkpoint (8% stolen, 0% others')") in text
    assert "sitting 1 3.000 ms (12% stolen, 0% others')" in text
