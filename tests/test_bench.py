"""The paper-evaluation benchmark's tables (pure) and its command line."""

from __future__ import annotations

import os
import sys

import pytest

pytestmark = pytest.mark.fast  # no TensorFlow cluster: `pytest -m fast` runs these in under a minute


HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(HERE, os.pardir, "benchmarks", "paper.py")


def _bench_module(name):
    sys.path.insert(0, os.path.dirname(BENCH))
    try:
        return __import__(name)
    finally:
        sys.path.remove(os.path.dirname(BENCH))


@pytest.fixture(scope="module")
def paper():
    return _bench_module("paper")


@pytest.fixture(scope="module")
def sizing():
    return _bench_module("sizing")


def _row(status, t, it=1000, pace=0.01, setting="s", moves=(), startup=1.0):
    return {"status": status, "completion_time_s": t, "iterations": it, "time_per_iteration_s": pace,
            "setting": setting, "most_used_setting": setting, "startup_s": startup,
            "reconfigurations": len(moves), "reconfiguration_cost_s": sum(moves),
            "reconfiguration_costs_s": list(moves)}


def test_a_capped_run_counts_at_the_cap_and_the_ratios_follow(paper):
    tuned = [_row("converged", 10.0, moves=(0.2, 0.4)), _row("converged", 14.0, moves=(0.3,))]
    fixed = [_row("converged", 8.0, setting="fast"), _row("converged", 30.0, setting="slow"),
             _row("stopped", 120.0, setting="capped")]
    s = paper._summary(tuned, fixed, cap=120.0)
    c = s["completion_time_s"]
    assert (c["worst"], c["best"], c["tfonline"]) == (120.0, 8.0, 12.0)
    assert c["average"] == pytest.approx((8 + 30 + 120) / 3)
    assert s["ratios"]["tfonline_over_best"] == pytest.approx(1.5)
    assert s["ratios"]["worst_over_tfonline"] == pytest.approx(10.0)
    assert s["capped"] == 1 and s["table_iv"]["best"] == "fast" and s["table_iv"]["worst"] == "capped"
    assert s["table_iii"]["average_converged"]["iterations"] == 1000  # capped runs left out of the averages
    assert s["ratios"]["gain_captured"] == pytest.approx((158 / 3 - 12) / (158 / 3 - 8))  # 91%
    assert paper._targets({"summary": s}) == [
        ("share of the Average -> Best gain captured", pytest.approx(0.9104, abs=1e-4), ">=", 0.9, True),
        ("tfonline / Best", pytest.approx(1.5), "<=", 1.1, False)]
    simulated = paper._targets({"summary": s, "simulated": True})
    assert simulated[-1] == ("Average / tfonline", pytest.approx(158 / 36), ">=", 2.5, True)
    v = paper._table_v(tuned, _row("converged", 20.0, moves=(1.2, 1.5)))
    assert v["online"]["median_cost_s"] == pytest.approx(0.3) and v["checkpoint"]["median_cost_s"] == 1.35
    assert v["median_ratio_checkpoint_over_online"] == pytest.approx(4.5)


def test_the_markdown_has_every_table(paper):
    tuned = [_row("converged", 10.0, moves=(0.2,))]
    fixed = [_row("converged", 8.0), _row("stopped", 100.0)]
    summary = paper._summary(tuned, fixed, 100.0)
    summary["stability"] = paper._stability([dict(tuned[0], tuning_overhead_s=0.3)], [_row("converged", 9.0)], 8.0)
    result = {"mode": "quick", "date": "2026-11-23", "fixed_settings": 2, "seeds": 1, "wall_s": 60.0, "cap_factor": 10,
              "machine": {"cores": 2, "memory_gib": 24, "platform": "p", "python": "3.11", "tensorflow": "2",
                          "nodes": 4},
              "workloads": {"logr": {"tuned": tuned, "fixed": fixed, "summary": summary,
                                     "table_v": paper._table_v(tuned, _row("converged", 12.0, moves=(0.8,))),
                                     "table_vi": {"runs": 1, "why": "fewer than 2 converged fixed runs",
                                                  "unrated": 2}}}}
    text = paper.markdown(result)
    for heading in ("## Completion time (Fig. 5) and ratios", "## Iterations and time per iteration (Table III)",
                    "## Settings (Table IV)", "## Reconfigurations (Table V)", "## Estimator rank (Table VI"):
        assert heading in text
    assert "| logr | 100.0 | 54.0 | 8.0 | 10.0 (10.0) | 5.40x | 10.00x | 1.25x | 1 of 2 |" in text
    assert "| 4.0x |" in text
    assert "| logr | 1 runs (and 2 kept without ratings), segments of - it | fewer than 2 converged fixed runs |" in text
    assert "## Against the targets" in text
    assert "| logr | share of the Average -> Best gain captured | 96% | >= 90% | met |" in text
    assert "| logr | tfonline / Best | 1.25x | <= 1.10x | short |" in text
    # One tuned run: no spread; 10 s against 9 s for the start setting; 0.3 s of tuner overhead.
    assert "| logr | 9.0 | - | 10.0 | - | 1.11x | 3.0% |" in text
    assert "| logr | slowest tuned run / its start setting | 1.11x | <= 1.10x | short |" in text
    assert "| logr | tfonline / Best, the start setting's run among the fixed | 1.25x | <= 1.10x | short |" in text
    assert "| logr | share of the job in tuner overhead (largest run) | 3% | <= 2% | short |" in text


def test_stability_sets_each_tuned_run_against_the_start_setting_at_its_seed(paper):
    tuned = [dict(_row("converged", t), tuning_overhead_s=o) for t, o in ((100.0, 1.0), (110.0, 1.1), (120.0, 3.6))]
    starts = [_row("converged", t) for t in (115.0, 90.0, 125.0)]  # the start setting at seeds 0, 1, 2
    st = paper._stability(tuned, starts, best_s=130.0)
    assert st["tuned_spread"] == pytest.approx(0.2) and st["start_spread"] == pytest.approx(35 / 90)
    # Paired by seed: seed 1's tuned run is the slowest against its start (110 / 90), though not the slowest run.
    assert st["slowest_tuned_over_start"] == pytest.approx(110 / 90)
    assert st["start_s"] == 115.0 and st["start_times"] == [115.0, 90.0, 125.0]
    assert st["tfonline_over_best_with_start"] == pytest.approx(110 / 115)  # seed 0's start beat every random setting
    assert paper._stability(tuned, starts, best_s=100.0)["tfonline_over_best_with_start"] == pytest.approx(1.1)
    assert st["overhead_shares"] == pytest.approx([0.01, 0.01, 0.03]) and st["overhead_share"] == pytest.approx(0.03)
    # A start run that did not converge gives no ratio for its seed (its time is only a lower bound), nor a spread.
    capped = paper._stability(tuned, [starts[0], _row("stopped", 300.0), starts[2]])
    assert capped["slowest_tuned_over_start"] == pytest.approx(120 / 125)  # seeds 0 and 2: 100 / 115, 120 / 125
    assert capped["start_spread"] is None and capped["start_times"] == [115.0, None, 125.0]
    assert paper._stability(tuned, [_row("stopped", 300.0)])["slowest_tuned_over_start"] is None
    # Smoke mode runs no start setting.
    assert paper._stability(tuned, [])["start_s"] is None and paper._stability(tuned, [])["start_spread"] is None


def test_an_unknown_workload_is_refused_in_one_line(paper, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", [BENCH])  # as `python benchmarks/paper.py` names itself
    with pytest.raises(SystemExit) as exited:
        paper.main(["--workloads", "logr,nope"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "paper.py: error: --workloads takes logr, svm, cnn, mlp, paper-sim, got 'nope'")


def test_sizing_reads_the_first_crossing_of_each_candidate_after_the_warm_up(sizing):
    # a smoothed loss falling 1.0 -> 0.5 over 100 steps, one step a tenth of a second, with an early dip
    rows = [{"step": k, "smoothed_loss": 1.0 - 0.005 * k, "wall_time": 10.0 + 0.1 * k} for k in range(1, 101)]
    rows[10]["smoothed_loss"] = 0.1  # inside the warm-up: not a crossing
    rows[70]["smoothed_loss"] = 0.55  # a dip at step 71: the first crossing of 0.6 and 0.55, not the trend's
    crossings = sizing.first_crossings(rows, [0.7025, 0.6, 0.55, 0.4], started=10.0)
    assert crossings[0.7025] == (60, pytest.approx(6.0))
    assert crossings[0.6] == crossings[0.55] == (71, pytest.approx(7.1))
    assert crossings[0.4] is None


def test_sizing_s_trend_crosses_only_where_the_mean_of_the_last_losses_does_not_where_a_dip_does(sizing):
    # losses alternating 0.4 and 0.6 (a mean of 0.5) for 60 steps, then 0.45 flat; one step a tenth of a second
    losses = [0.6 if k % 2 else 0.4 for k in range(60)] + [0.45] * 40
    rows = [{"step": k + 1, "loss": x, "smoothed_loss": x, "wall_time": 10.0 + 0.1 * k} for k, x in enumerate(losses)]
    trend = sizing.trend_crossings(rows, [0.5, 0.475, 0.451, 0.4], started=10.0, window=10)
    assert trend[0.5] == (10, pytest.approx(0.9))  # the first full window: five 0.4s and five 0.6s
    assert trend[0.475] == (66, pytest.approx(6.5))  # steps 57-66: two 0.4s, two 0.6s and six 0.45s, 0.47
    assert trend[0.451] == (70, pytest.approx(6.9))  # the first window of 0.45s alone
    assert trend[0.4] is None  # the 0.4 losses are dips under a trend of 0.5, never the trend
    assert sizing.first_crossings(rows, [0.4], started=10.0)[0.4] == (51, pytest.approx(5.0))  # the dip crosses
    assert sizing.trend_crossings(rows[:5], [0.5], started=10.0, window=10) == {0.5: None}  # too short to tell


def test_sizing_refuses_an_unknown_workload_in_one_line(sizing, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", [os.path.join(os.path.dirname(BENCH), "sizing.py")])
    with pytest.raises(SystemExit) as exited:
        sizing.main(["--workloads", "cnn,nope"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "sizing.py: error: --workloads takes logr, svm, cnn, mlp, got 'nope'")
    with pytest.raises(SystemExit) as exited:
        sizing.main(["--workloads", "mlp", "--learning-rate", "0"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "sizing.py: error: --learning-rate takes a number > 0, got 0")


# -- a benchmark in sittings (benchmarks/journal.py) ---------------------------------------------------------------

CONFIG = {"mode": "smoke", "workloads": "logr", "fixed": 1, "seeds": 1, "draw_seed": 2026}


@pytest.fixture(scope="module")
def journal():
    return _bench_module("journal")


def test_a_resumed_journal_has_the_runs_and_wall_time_of_its_earlier_sittings(journal, tmp_path):
    path = str(tmp_path / "2026-11-28-smoke-runs.jsonl")
    first = journal.Journal.start(path, CONFIG)
    first.begin_sitting(revision="abc1234")
    first.record("logr/tuned/0", {"status": "converged", "completion_time_s": 30.0})
    first.before_s = 100.0  # as if the sitting had run 100 s before this run ended
    first.record("logr/fixed/0", {"status": "stopped", "completion_time_s": 90.0})
    first.end_sitting("stopped after 0 min")
    with open(path, "a") as f:
        f.write('{"run": "logr/fixed/1", "row": {"sta')  # a line cut short when the machine went away
    second = journal.Journal.resume(path, CONFIG)
    second.begin_sitting(revision="def5678+")
    assert second.revisions == ["abc1234", "def5678+"]
    assert journal.Journal.resume(path, CONFIG).revisions == ["abc1234", "def5678+"]  # as the file has them
    assert second.runs == {"logr/tuned/0": {"status": "converged", "completion_time_s": 30.0},
                           "logr/fixed/0": {"status": "stopped", "completion_time_s": 90.0}}
    assert second.sittings == 2 and 100.0 <= second.elapsed_s < 110.0 and not second.finished
    assert journal.latest_unfinished(str(tmp_path), "smoke") == path[: -len(journal.SUFFIX)]
    second.finish()
    assert second.finished and journal.latest_unfinished(str(tmp_path), "smoke") is None
    assert journal.latest_unfinished(str(tmp_path), "full") is None


def test_a_journal_of_another_benchmark_is_refused_in_one_line(journal, paper, tmp_path, capsys, monkeypatch):
    path = str(tmp_path / "2026-11-27-smoke-runs.jsonl")
    journal.Journal.start(path, CONFIG)
    with pytest.raises(journal.JournalError) as refused:
        journal.Journal.resume(path, dict(CONFIG, fixed=2))
    assert str(refused.value) == (f"{path} is the journal of another benchmark: expected mode smoke, workloads logr, "
                                  "fixed 2, seeds 1, draw_seed 2026, got mode smoke, workloads logr, fixed 1, seeds 1, "
                                  "draw_seed 2026")
    monkeypatch.setattr(sys, "argv", [BENCH])
    with pytest.raises(SystemExit) as exited:  # before any TensorFlow, and the journal is left as it was
        paper.main(["--mode", "smoke", "--fixed", "2", "--out", str(tmp_path), "--resume"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"paper.py: error: {refused.value}"
    assert journal.Journal.resume(path, CONFIG).runs == {}
    with pytest.raises(SystemExit):
        paper.main(["--stop-after", "-1"])
    said = capsys.readouterr().err.strip().splitlines()[-1]
    assert said == "paper.py: error: --stop-after takes minutes >= 0, got -1"


def test_the_tuned_runs_repository_goes_back_to_its_copy_after_the_last_finished_run(journal, tmp_path):
    import sqlite3

    db = str(tmp_path / "tuned.db")

    def jobs():
        with sqlite3.connect(db) as conn:
            return [j for (j,) in conn.execute("select id from jobs order by id")]

    assert journal.restore(db) is False and not os.path.exists(db)  # no finished tuned run: a fresh repository
    with sqlite3.connect(db) as conn:
        conn.execute("pragma journal_mode=wal")
        conn.execute("create table jobs (id text)")
        conn.execute("insert into jobs values ('finished')")
    journal.keep(db)
    with sqlite3.connect(db) as conn:
        conn.execute("insert into jobs values ('interrupted')")
    assert jobs() == ["finished", "interrupted"]
    assert journal.restore(db) is True and jobs() == ["finished"]


def test_on_another_machine_the_tuned_runs_repository_comes_back_from_its_sql_text(journal, tmp_path):
    """Git ignores the repositories; it keeps their SQL text, which leaves out what no later job reads."""
    import sqlite3

    db = str(tmp_path / "tuned.db")
    with sqlite3.connect(db) as conn:
        conn.execute("create table jobs (id text)")
        conn.execute("create table iterations (job_id text, step integer, loss real)")
        conn.execute("insert into jobs values ('finished')")
        conn.executemany("insert into iterations values ('finished', ?, 0.5)", [(k,) for k in range(1000)])
    journal.keep(db)
    with sqlite3.connect(db) as conn:
        conn.execute("insert into jobs values ('interrupted')")
    os.remove(db + ".kept")  # the fresh checkout of another machine: only what git keeps
    assert journal.kept_copy(db) == db + journal.CARRIED
    assert journal.restore(db) is True
    with sqlite3.connect(db) as conn:
        assert conn.execute("select id from jobs").fetchall() == [("finished",)]
        assert conn.execute("select count(*) from iterations").fetchone() == (0,)
    os.remove(db + journal.CARRIED)
    assert journal.kept_copy(db) is None and journal.restore(db) is False and not os.path.exists(db)


def test_kept_runs_are_taken_from_the_journal_and_a_sitting_stops_on_time(journal, paper, tmp_path):
    book = journal.Journal.start(str(tmp_path / "j-runs.jsonl"), CONFIG)
    book.record("logr/tuned/0", {"completion_time_s": 30.0})
    ran = []
    kept = paper.Kept(book, log=lambda message: None, stop_after_s=0.0)

    def run(name):
        ran.append(name)
        return {"completion_time_s": 1.0}

    assert kept("logr/tuned/0", lambda: run("tuned")) == {"completion_time_s": 30.0}
    assert kept("logr/fixed/0", lambda: run("fixed 0")) == {"completion_time_s": 1.0}  # a sitting runs one at least
    with pytest.raises(paper._Stop):
        kept("logr/fixed/1", lambda: run("fixed 1"))
    assert ran == ["fixed 0"] and set(journal.Journal.resume(book.path, CONFIG).runs) == {"logr/tuned/0",
                                                                                          "logr/fixed/0"}


def test_a_workload_s_estimator_ratings_are_kept_and_not_made_again_by_a_later_sitting(journal, paper, tmp_path,
                                                                                       monkeypatch):
    rated = []
    monkeypatch.setattr(paper, "_run", lambda *args, **kwargs: _row("converged", 10.0))
    monkeypatch.setattr(paper, "_fixed", lambda *args, **kwargs: dict(_row("converged", 20.0),
                                                                       traces={"ratings": {"made": 1}}))
    monkeypatch.setattr(paper, "_table_vi", lambda traces: rated.append(traces) or {"runs": 2, "segment": 10})
    path, dbs = str(tmp_path / "j-runs.jsonl"), (str(tmp_path / "t.db"), str(tmp_path / "f.db"))
    first = paper._real("logr", "smoke", 1, [{}], *dbs, lambda message: None,
                        kept=paper.Kept(journal.Journal.start(path, CONFIG), log=lambda message: None))
    said = []
    again = paper._real("logr", "smoke", 1, [{}], *dbs, said.append,
                        kept=paper.Kept(journal.Journal.resume(path, CONFIG), log=said.append))
    assert rated == [[{"ratings": {"made": 1}}]]  # the fixed run's traces, as the journal kept them
    assert first["table_vi"] == again["table_vi"] == {"runs": 2, "segment": 10}
    kept_row = journal.Journal.resume(path, CONFIG).runs["logr/fixed/0"]
    assert "traces" not in first["fixed"][0] and "traces" not in kept_row  # not in the tables' JSON
    assert "    kept                  logr/table_vi, from an earlier sitting" in said  # no time: not a run


def test_the_early_staleness_experiment_refuses_an_unknown_run_in_one_line(capsys, monkeypatch):
    experiment = _bench_module("early_staleness")
    monkeypatch.setattr(sys, "argv", [os.path.join(os.path.dirname(BENCH), "early_staleness.py")])
    with pytest.raises(SystemExit) as exited:
        experiment.main(["C", "Z"])
    assert exited.value.code == 2
    said = capsys.readouterr().err.strip().splitlines()[-1]
    assert said == "early_staleness.py: error: the runs are C, A, B, D, E, F, got 'Z'"


def test_seed_noise_prices_a_predictor_that_knows_only_the_mean_of_the_seeds():
    noise = _bench_module("seed_noise")
    errors = noise.mean_predictor_errors([100, 300])  # mean 200
    # At half of each run: 200 - 50 left against 50 (an error of 2), 200 - 150 left against 150 (2/3).
    assert errors[0.5] == pytest.approx((2 + 2 / 3) / 2)
    assert errors[0.75] == pytest.approx((100 / 25 + 100 / 75) / 2)  # the same miss, later: a larger share
    assert noise.mean_predictor_errors([500, 500, 500]) == {0.25: 0.0, 0.5: 0.0, 0.75: 0.0}


@pytest.mark.parametrize("argv, said", [
    (["--workloads", "cnn,nope"], "seed_noise.py: error: --workloads takes logr, svm, cnn, mlp, got 'nope'"),
    (["--seeds", "1"], "seed_noise.py: error: --seeds must be at least 2, got 1")])
def test_seed_noise_refuses_bad_input_in_one_line(argv, said, capsys, monkeypatch):
    noise = _bench_module("seed_noise")
    monkeypatch.setattr(sys, "argv", [os.path.join(os.path.dirname(BENCH), "seed_noise.py")])
    with pytest.raises(SystemExit) as exited:
        noise.main(argv)
    assert exited.value.code == 2 and capsys.readouterr().err.strip().splitlines()[-1] == said


def test_a_journal_whose_tuned_repository_is_gone_is_refused_in_one_line_unless_accepted(journal, paper, tmp_path,
                                                                                           capsys, monkeypatch):
    """A fresh checkout has the journal and the SQL text of the tuned runs' repository (git keeps both), not the
    repositories. Where that text is missing too (a benchmark kept before it was written), the tuned runs to come
    would inherit nothing from the kept ones: refused, unless --accept-lost, which the tables then tell."""
    stem = tmp_path / "2026-11-28-smoke"
    book = journal.Journal.start(f"{stem}{journal.SUFFIX}", CONFIG)
    book.begin_sitting(revision="abc1234")
    book.record("logr/tuned/0", {"status": "converged", "completion_time_s": 30.0})
    monkeypatch.setattr(sys, "argv", [BENCH])
    with pytest.raises(SystemExit) as exited:
        paper.main(["--mode", "smoke", "--out", str(tmp_path), "--resume"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"paper.py: error: --resume: {stem}-tuned.db.kept.sql is missing; the tuned runs {stem}{journal.SUFFIX} "
        "keeps left it for those to come (--accept-lost goes on without it, or remove the journal to start afresh)")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(paper, "_real", interrupted)  # the sitting ends at once: no cluster
    assert paper.main(["--mode", "smoke", "--out", str(tmp_path), "--resume", "--accept-lost"]) == paper.UNFINISHED
    assert "tuned.db.kept.sql was lost: the tuned runs to come inherit nothing" in capsys.readouterr().out
    again = journal.Journal.resume(f"{stem}{journal.SUFFIX}", CONFIG)
    assert again.lost == {2: f"{stem}-tuned.db.kept.sql"}
    said = paper._sittings({"sittings": 3, "revisions": [], "lost": again.lost})
    assert "sitting 2 went on without 2026-11-28-smoke-tuned.db.kept.sql, lost with the machine before it" in said


def test_a_rating_that_fails_leaves_the_run_kept_without_it(paper, monkeypatch):
    """A fixed run's ratings are a helper's work: where they fail, the log says so and the run is kept unrated."""
    monkeypatch.setattr(paper, "_run", lambda *args, **kwargs: dict(_row("converged", 20.0), job_id="j1",
                                                                     traces={"curve": {"job_id": "j1"}}))

    def broken(db, job_id):
        raise ValueError("a fit that went wrong")

    monkeypatch.setattr(paper, "_ratings", broken)
    said = []
    row = paper._fixed("logr", "smoke", None, 100.0, "fixed.db", said.append)
    assert row["status"] == "converged" and row["traces"] == {"curve": {"job_id": "j1"}}
    assert said == ["    no ratings kept: ValueError: a fit that went wrong"]
    assert paper._table_vi([row["traces"], row["traces"]]) == {
        "runs": 0, "why": "fewer than 2 converged fixed runs", "unrated": 2,
        "unrated_why": paper._table_vi([None])["unrated_why"]}


def test_a_sitting_s_revision_is_marked_changed_by_code_not_by_the_benchmark_s_own_results(paper, tmp_path,
                                                                                          monkeypatch):
    import subprocess

    def git(*args):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True,
                       capture_output=True)

    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "benchmarks" / "paper.py").write_text("code\n")
    (tmp_path / "benchmarks" / "results" / "x-runs.jsonl").write_text("{}\n")
    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "one")
    monkeypatch.setattr(paper, "HERE", str(tmp_path / "benchmarks"))
    clean = paper._revision()
    (tmp_path / "benchmarks" / "results" / "x-runs.jsonl").write_text("{}\n{\"redo\": \"svm\"}\n")
    assert paper._revision() == clean and not clean.endswith("+")
    (tmp_path / "benchmarks" / "paper.py").write_text("changed\n")
    assert paper._revision() == clean + "+"


def _fake_fixed(paper, times, calls, deferred_at=None):
    """A stand-in for one fixed run: ``times`` by (the setting's "x", or None for the default; seed)."""
    def fixed(name, mode, setting, cap, fixed_db, log, seed=0, rate=True):
        x = None if setting is None else setting["x"]
        if (x, seed) == deferred_at:
            raise paper._Deferred("logr's speed check expected 3.0 ms per iteration within 1.25x, got 6.0 ms")
        calls.append((x, seed, rate))
        return dict(_row("converged", times[x, seed], setting="default" if x is None else f"x{x}"))
    return fixed


FULL = {"mode": "full", "workloads": "logr", "fixed": 2, "seeds": 3, "draw_seed": 2026}
TIMES = {(None, 0): 120.0, (None, 1): 125.0, (None, 2): 118.0, (1, 0): 150.0, (2, 0): 80.0, (2, 1): 110.0,
         (2, 2): 90.0}


def test_the_best_setting_runs_again_at_each_tuned_seed_and_is_set_against_the_tuned_runs_seed_for_seed(
        journal, paper, tmp_path, monkeypatch):
    monkeypatch.setattr(paper, "_run", lambda *args, **kwargs: _row("converged", 100.0))  # tuned and checkpoint
    calls = []
    monkeypatch.setattr(paper, "_fixed", _fake_fixed(paper, TIMES, calls))
    path, dbs = str(tmp_path / "j-runs.jsonl"), (str(tmp_path / "t.db"), str(tmp_path / "f.db"))
    w = paper._real("logr", "full", 3, [{"x": 1}, {"x": 2}], *dbs, lambda message: None,
                    kept=paper.Kept(journal.Journal.start(path, FULL), log=lambda message: None))
    # The default at seeds 0-2, the two random settings at seed 0, then the fastest (x2, 80 s) at seeds 1 and 2,
    # unrated: Table VI rates R distinct settings.
    assert calls == [(None, 0, True), (None, 1, True), (None, 2, True), (1, 0, True), (2, 0, True), (2, 1, False),
                     (2, 2, False)]
    b = w["summary"]["best_seeds"]
    assert (b["fixed_index"], b["setting"], b["times_s"], b["deferred"]) == (1, "x2", [80.0, 110.0, 90.0], None)
    assert b["mean_s"] == pytest.approx(280 / 3) and b["spread"] == pytest.approx(30 / 80)
    r = w["summary"]["ratios"]
    assert r["tfonline_over_best"] == pytest.approx(100 / 80)  # against the luckiest run: short of 1.10
    assert r["tfonline_over_best_mean"] == pytest.approx(300 / 280)  # against the same setting's mean: within it
    assert r["gain_captured_best_mean"] == pytest.approx((115 - 100) / (115 - 280 / 3))
    targets = {label: (value, met) for label, value, _, _, met in paper._targets(w)}
    assert targets["tfonline / the best setting's mean over the tuned seeds"] == (pytest.approx(300 / 280), True)
    assert targets["share of the gain captured, to the best setting's mean over the tuned seeds"][1] is False
    assert targets["tfonline / Best"] == (pytest.approx(1.25), False)  # the single fastest run's row stays
    text = paper.markdown({"mode": "full", "date": "2026-12-01", "fixed_settings": 2, "seeds": 3, "wall_s": 60.0,
                           "cap_factor": 10, "workloads": {"logr": w},
                           "machine": {"cores": 2, "memory_gib": 24, "platform": "p", "python": "3.11",
                                       "tensorflow": "2", "nodes": 4}})
    assert "## The best fixed setting at every tuned seed" in text
    assert "| logr | x2 (fixed/1) | 80.0, 110.0, 90.0 | 10.00, 10.00, 10.00 | 93.3 | 38% | 1.07x | 69% |" in text
    # A later sitting takes them from the journal: nothing runs again.
    again = paper._real("logr", "full", 3, [{"x": 1}, {"x": 2}], *dbs, lambda message: None,
                        kept=paper.Kept(journal.Journal.resume(path, FULL), log=lambda message: None))
    assert len(calls) == 7 and again["summary"]["best_seeds"] == b


def test_a_sitting_whose_best_setting_runs_are_deferred_keeps_the_workload_s_tables_and_is_unfinished(
        paper, tmp_path, capsys, monkeypatch):
    """On another machine the best setting's runs at the other seeds wait (a speed check defers them): the
    workload's tables stand, without that mean, and the sitting says the benchmark is not done."""
    monkeypatch.setattr(paper, "_run", lambda *args, **kwargs: _row("converged", 100.0))
    monkeypatch.setattr(paper, "_fixed", _fake_fixed(paper, TIMES, [], deferred_at=(2, 2)))
    monkeypatch.setattr(paper, "_machine", lambda: {"cores": 2, "memory_gib": 24, "platform": "p", "python": "3.11",
                                                     "tensorflow": "2", "nodes": 4})  # no TensorFlow import
    monkeypatch.setattr(paper, "draw_settings", lambda space, count, seed: [{"x": 1}, {"x": 2}])
    monkeypatch.setattr(paper.speed, "measure", lambda name, mode: {"time_per_iteration_s": 0.003,
                                                                     "iterations": 100})  # no check runs a job
    monkeypatch.setattr(sys, "argv", [BENCH])
    status = paper.main(["--mode", "full", "--workloads", "logr", "--fixed", "2", "--seeds", "3",
                         "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert status == paper.UNFINISHED
    assert ("logr's best setting at the other seeds deferred: logr's speed check expected 3.0 ms per iteration "
            "within 1.25x, got 6.0 ms") in out
    assert "deferred logr (another machine)" in out
    text = next(tmp_path.glob("*-full.md")).read_text()
    assert "| logr | x2 (fixed/1) | 80.0, 110.0 | 10.00, 10.00 | - (the other seeds deferred) | - | -x | - |" in text
    assert "| logr | tfonline / Best | 1.25x | <= 1.10x | short |" in text
    assert "the best setting's mean" not in text.split("## Against the targets")[1].split("##")[0]


def test_a_workload_whose_runs_all_predate_the_speed_checks_does_not_run_its_best_setting_again(
        journal, paper, tmp_path, monkeypatch):
    """A check made now would become such a workload's reference on whatever machine this is, and its runs here
    would be set beside runs of a machine nobody measured: the best setting is not run again, and says why."""
    book = journal.Journal.start(str(tmp_path / "j-runs.jsonl"), FULL)
    for key in ("logr/tuned/0", "logr/tuned/1", "logr/tuned/2", "logr/checkpoint"):
        book.record(key, _row("converged", 100.0))
    for key, t in (("logr/start", 120.0), ("logr/start/1", 125.0), ("logr/start/2", 118.0), ("logr/fixed/0", 150.0),
                   ("logr/fixed/1", 80.0)):
        book.record(key, _row("converged", t, setting="x2" if key == "logr/fixed/1" else "s"))
    checked, said = [], []
    monkeypatch.setattr(paper, "_fixed", _fake_fixed(paper, TIMES, calls := []))
    w = paper._real("logr", "full", 3, [{"x": 1}, {"x": 2}], str(tmp_path / "t.db"), str(tmp_path / "f.db"),
                    said.append, kept=paper.Kept(book, said.append, check=lambda name: checked.append(name)))
    assert calls == [] and checked == []  # nothing ran, so no check became logr's reference
    b = w["summary"]["best_seeds"]
    assert b["mean_s"] is None and b["deferred"] is None and b["times_s"] == [80.0]
    assert b["skipped"] == "its runs were kept before the speed checks began, on a machine no check measured"
    assert f"logr: the best random setting (fixed/1) is not run again: {b['skipped']}" in said
    assert "tfonline_over_best_mean" not in w["summary"]["ratios"]
    assert ("| logr | x2 (fixed/1) | 80.0 | 10.00 | - (not run: its runs were kept before the speed checks began, on a "
            "machine no check measured) | - | -x | - |") in paper.markdown(
        {"mode": "full", "date": "2026-12-01", "fixed_settings": 2, "seeds": 3, "wall_s": 60.0, "cap_factor": 10,
         "workloads": {"logr": w}, "machine": {"cores": 2, "memory_gib": 24, "platform": "p", "python": "3.11",
                                               "tensorflow": "2", "nodes": 4}})


def test_a_sitting_whose_speed_check_failed_runs_the_best_setting_again_like_its_other_runs(
        journal, paper, tmp_path, monkeypatch):
    """A check that fails checks nothing: the sitting's runs go on unchecked, and the best setting's with them."""
    monkeypatch.setattr(paper, "_run", lambda *args, **kwargs: _row("converged", 100.0))
    monkeypatch.setattr(paper, "_fixed", _fake_fixed(paper, TIMES, calls := []))

    def broken(name):
        raise RuntimeError("no cluster")

    said = []
    w = paper._real("logr", "full", 3, [{"x": 1}, {"x": 2}], str(tmp_path / "t.db"), str(tmp_path / "f.db"),
                    said.append, kept=paper.Kept(journal.Journal.start(str(tmp_path / "j-runs.jsonl"), FULL),
                                                 said.append, check=broken))
    assert "    no speed check of logr: RuntimeError: no cluster" in said
    assert calls[-2:] == [(2, 1, False), (2, 2, False)]
    assert w["summary"]["best_seeds"]["skipped"] is None and w["summary"]["best_seeds"]["mean_s"] == pytest.approx(
        280 / 3)


def _rating(errors, segment=60):
    return {"training_time_s": 10.0, "segment": segment, "predicted_s": [5.0, 4.0],
            "relative_error": {"0.25": errors[0], "0.5": errors[1], "0.75": errors[2]}}


def test_the_eta_with_the_jobs_earlier_runs_is_rated_beside_the_estimators_and_is_what_the_target_reads(paper):
    """Table VI keeps each estimator's errors, and beside them the ETA's as the runs showed it (hogwild's recorded
    answers with the job's earlier runs, and those answers alone); the target reads the ETA's where every rated
    run has them, the estimator's alone where some were rated before, and its row says which."""
    def run(hogwild, eta, earlier):
        ratings = {name: _rating(hogwild) for name in ("hogwild", "loss-curve")}
        if eta is not None:
            ratings["eta"] = {"earlier_runs": earlier, "relative_error": dict(_rating(eta)["relative_error"]),
                              "recorded_error": dict(_rating(hogwild)["relative_error"])}
        return {"ratings": ratings}

    both = paper._table_vi([run((0.3, 0.2, 0.1), (0.3, 0.2, 0.1), 0), run((0.5, 0.4, 0.3), (0.1, 0.2, 0.15), 2),
                            run((0.7, 0.6, 0.5), (0.2, 0.1, 0.05), 3)])
    assert both["eta"] == {"runs": 3, "with_earlier_runs": 2,
                           "median_relative_error": {"0.25": 0.2, "0.5": 0.2, "0.75": 0.1},
                           "median_recorded_error": {"0.25": 0.5, "0.5": 0.4, "0.75": 0.3}}
    assert both["hogwild"]["median_relative_error"] == {"0.25": 0.5, "0.5": 0.4, "0.75": 0.3}
    summary = {"ratios": {}}
    (row,) = paper._targets({"summary": summary, "table_vi": both})
    assert row == ("ETA error share, with the job's earlier runs (worst of 25 / 50 / 75%)", 0.2, "<=", 0.25, True)
    older = paper._table_vi([run((0.3, 0.2, 0.1), None, 0), run((0.5, 0.4, 0.3), (0.1, 0.2, 0.15), 2)])
    (row,) = paper._targets({"summary": summary, "table_vi": older})
    assert row[0].startswith("ETA error share, hogwild alone (worst of 25 / 50 / 75%; rated before the ETA took")
    assert row[1:] == (0.4, "<=", 0.25, False)


def test_runs_rated_before_the_eta_took_earlier_runs_get_its_errors_from_the_repository(journal, paper, tmp_path,
                                                                                       monkeypatch):
    book = journal.Journal.start(str(tmp_path / "j-runs.jsonl"), CONFIG)
    for key, job_id in (("logr/fixed/0", "j0"), ("logr/fixed/1", "j1"), ("logr/fixed/2", None)):
        book.record(key, dict(_row("converged", 20.0), **({"job_id": job_id} if job_id else {})),
                    {"ratings": {"hogwild": _rating((0.3, 0.2, 0.1))}})

    def mend(db, job_id, ratings):
        if job_id == "j1":
            raise OSError("the repository is gone")
        return dict(ratings, eta={"earlier_runs": 2, "relative_error": {"0.25": 0.1, "0.5": 0.1, "0.75": 0.1},
                                  "recorded_error": {"0.25": 0.3, "0.5": 0.2, "0.75": 0.1}})

    monkeypatch.setattr(paper, "_mend_eta", mend)
    said = []
    paper._mend_etas(book, ["logr/fixed/0", "logr/fixed/1", "logr/fixed/2"], "f.db", said.append)
    assert said == ["    no ETA ratings kept: OSError: the repository is gone"]
    traces = journal.Journal.resume(book.path, CONFIG).traces
    assert traces["logr/fixed/0"]["ratings"]["eta"]["earlier_runs"] == 2
    assert traces["logr/fixed/0"]["ratings"]["hogwild"] == _rating((0.3, 0.2, 0.1))  # the rest kept as it was
    assert "eta" not in traces["logr/fixed/1"]["ratings"] and "eta" not in traces["logr/fixed/2"]["ratings"]


def test_the_eta_experiment_rebuilds_the_curves_answers_from_a_journal_and_takes_the_earlier_runs(journal, tmp_path,
                                                                                                  capsys):
    """Fixed runs whose curve said twice the iterations left all along: rebuilt from their kept ratings, the
    ETA of each run after the second (a prior of the runs before it, their bias taken out) is near the truth."""
    sys.path.insert(0, os.path.join(os.path.dirname(BENCH), "experiments"))
    try:
        import eta_prior
    finally:
        sys.path.remove(os.path.join(os.path.dirname(BENCH), "experiments"))
    book = journal.Journal.start(str(tmp_path / "j-runs.jsonl"), CONFIG)
    for i, total in enumerate((1200, 1000, 1100, 1000)):
        pace, segment = 0.01, 60
        predicted = [2 * (total - segment * (m + 1)) * pace for m in range(total // segment)]
        ratings = {"hogwild": {"training_time_s": total * pace, "segment": segment, "predicted_s": predicted,
                               "relative_error": {"0.25": 1.0, "0.5": 1.0, "0.75": 1.0}}}
        book.record(f"logr/fixed/{i}", dict(_row("converged", 20.0, it=total), job_id=f"j{i}"),
                    {"curve": {"job_id": f"j{i}"}, "ratings": ratings})
    assert eta_prior.main(["--journal", book.path[: -len("-runs.jsonl")]]) == 0
    out = capsys.readouterr().out
    assert "logr/fixed/1" in out and "(no prior)" in out
    median = next(line for line in out.splitlines() if "median over the 2 runs with a prior" in line)
    curve, eta = median.split("curve ")[1].split("; the ETA ")
    assert curve == "1.00 / 1.00 / 1.00"
    assert all(float(x) < 0.1 for x in eta.split(" / ")), median
    assert eta_prior.main([]) == 2
    assert capsys.readouterr().err == ("eta_prior.py: expected a repository, or --journal STEM [--set-aside] "
                                       "[--pooled], got no arguments\n")
    assert eta_prior.main(["--journal", "x", "--all"]) == 2
    assert capsys.readouterr().err.endswith("got --journal x --all\n")


def test_the_eta_experiment_takes_the_runs_on_the_same_worker_count_or_with_pooled_them_all(journal, tmp_path,
                                                                                            capsys):
    sys.path.insert(0, os.path.join(os.path.dirname(BENCH), "experiments"))
    try:
        import eta_prior
    finally:
        sys.path.remove(os.path.join(os.path.dirname(BENCH), "experiments"))
    book = journal.Journal.start(str(tmp_path / "j-runs.jsonl"), CONFIG)
    for i, (total, setting) in enumerate(((1000, "ps1 w1 t1/1"), (2000, "ps1 w3 t2/2"), (1000, "ps2 w1 t1/2"),
                                          (2000, "ps1 w3 t1/1"), (2000, "ps2 w3 t1/1"))):
        predicted = [(total - 60 * (m + 1)) * 0.01 for m in range(total // 60)]
        ratings = {"hogwild": {"training_time_s": total * 0.01, "segment": 60, "predicted_s": predicted,
                               "relative_error": {"0.25": 0.0, "0.5": 0.0, "0.75": 0.0}}}
        book.record(f"logr/fixed/{i}", dict(_row("converged", 20.0, it=total, setting=setting), job_id=f"j{i}"),
                    {"curve": {"job_id": f"j{i}"}, "ratings": ratings})
    stem = book.path[: -len("-runs.jsonl")]
    assert eta_prior.main(["--journal", stem]) == 0
    last = next(line for line in capsys.readouterr().out.splitlines() if "logr/fixed/4" in line)
    assert "(2 earlier runs on 3 workers, sd" in last, last
    assert eta_prior.main(["--journal", stem, "--pooled"]) == 0
    last = next(line for line in capsys.readouterr().out.splitlines() if "logr/fixed/4" in line)
    assert "(4 earlier runs, sd" in last, last
    assert eta_prior.main(["--journal", stem, "--pooled", "--pooled"]) == 2
    assert capsys.readouterr().err.endswith("got --journal " + stem + " --pooled --pooled\n")
