"""run(tune=True) on a real local cluster: phases, decisions, reconfigurations, restored model, resume."""

from __future__ import annotations

import sqlite3

import pytest
from conftest import own_node_processes
from jobs import SlowerLogR, TunedLogR

from tfonline.exceptions import ConfigurationError

# Thread pools and XLA pinned: no node restart or XLA compile, so the test is quick.
SPACE = {"intra_op_parallelism_threads": 2, "inter_op_parallelism_threads": 2, "global_jit_level": "OFF"}
LOOP = {"initial_iterations": 40, "random_settings": 2, "segment_iterations": 15, "min_segment_s": 0,
        "exploration_budget": None}  # both random settings, whatever they cost


@pytest.fixture(scope="module")
def tuned(cluster, tmp_path_factory):
    db = str(tmp_path_factory.mktemp("tune") / "runs.db")
    # About two thousand iterations: the GP's decisions (about a second each on two busy cores) leave the job time to
    # reach its online phase; the first switch comes after 40, when the loss is clearly under log 2.
    first = TunedLogR().run(setting={"ps": 2, "worker": 1}, tune=True, db=db, cluster=cluster, quiet=True,
                                   space=SPACE, tuning=LOOP)
    second = TunedLogR().run(setting={"ps": 2, "worker": 1}, tune=True, db=db, cluster=cluster, quiet=True,
                                    space=SPACE, tuning=LOOP)
    return db, first, second


def _rows(db, sql, *args):
    return sqlite3.connect(db).execute(sql, args).fetchall()


def test_a_tuned_job_converges_through_its_phases(tuned):
    db, first, _ = tuned
    assert first.status == "converged", first.stop_reason
    phases = _rows(db, "select phase, start_step from phases where job_id = ? order by start_step", first.job_id)
    assert [p for p, _ in phases] == ["initial", "random", "online"]
    decisions = _rows(db, "select phase, applied, reason, overhead_s from decisions where job_id = ? order by step",
                      first.job_id)
    assert [d[0] for d in decisions[:2]] == ["random", "random"]
    assert all(d[3] is not None and d[3] >= 0 for d in decisions)
    overhead = _rows(db, "select tuning_overhead_s, completion_time_s from jobs where id = ?", first.job_id)[0]
    assert 0 < overhead[0] < overhead[1]
    segments = _rows(db, "select segment, phase, start_step, end_step from segments where job_id = ? order by 1",
                     first.job_id)
    assert segments[0][1:3] == ("initial", 1) and all(a[3] + 1 == b[2] for a, b in zip(segments, segments[1:]))
    steps = [s for (s,) in _rows(db, "select step from iterations where job_id = ? order by step", first.job_id)]
    assert steps == list(range(1, first.iterations + 1))


def test_the_job_trains_on_while_the_tuner_decides(tuned):
    db, first, _ = tuned
    triples = _rows(db, "select segment from triples where job_id = ? order by segment", first.job_id)
    decisions = _rows(db, "select step, phase from decisions where job_id = ? order by step", first.job_id)
    ends = dict(_rows(db, "select segment, end_step from segments where job_id = ?", first.job_id))
    assert len(triples) == len(decisions) > 0
    # The k-th decision is on the k-th triple's segment, and is recorded no earlier than that segment's end.
    for (segment,), (step, _) in zip(triples, decisions):
        assert step >= ends[segment]
    # An online decision fits a GP (about a second): the workers went on meanwhile.
    assert any(step > ends[segment] for (segment,), (step, phase) in zip(triples, decisions) if phase == "online")


def test_a_switch_keeps_the_model_and_records_its_cost(tuned):
    db, first, _ = tuned
    switches = _rows(db, "select step, types, technique, cost_s, bytes_moved from reconfigurations where job_id = ?",
                     first.job_id)
    assert switches, "the random phase switches at least once"
    for step, types, technique, cost, moved in switches:
        # Threads are pinned here: a switch of session knobs only (type II) is SSR and moves nothing; a ps
        # change is ODMR, and any layout change re-shards the input (TDR).
        parts = technique.split("+")
        assert cost >= 0 and set(parts) <= {"odmr", "tdr", "ssr"}  # a live switch may cost nothing
        assert ("odmr" in parts) == ("I-b" in types) and ("tdr" in parts) == bool({"I-a", "I-b"} & set(types.split("+")))
        assert ("ssr" in parts) == ("II" in types.split("+"))
        if technique == "ssr":
            assert moved == 0
        before = _rows(db, "select avg(loss) from iterations where job_id = ? and step between ? and ?",
                       first.job_id, step - 9, step)[0][0]
        after = _rows(db, "select avg(loss) from iterations where job_id = ? and step between ? and ?",
                      first.job_id, step + 1, step + 10)[0][0]
        assert after < 0.69 and abs(after - before) < 0.05  # the model went on from where it was, not from zero


def test_a_second_run_resumes_tuning(tuned):
    db, first, second = tuned
    assert second.status == "converged", second.stop_reason
    phases = [p for (p,) in _rows(db, "select phase from phases where job_id = ? order by start_step", second.job_id)]
    assert phases == ["initial", "online"]
    assert not _rows(db, "select 1 from decisions where job_id = ? and phase = 'random'", second.job_id)
    # The first run's segments left their slopes: the second starts from its convergence speeds too.
    slopes = _rows(db, "select count(*), count(slope) from triples where job_id = ? and remaining_s is not null",
                   first.job_id)[0]
    assert slopes[0] > 0 and slopes[1] >= slopes[0] - 1


@pytest.mark.parametrize("kwargs, message", [
    (dict(tune=True, space={"worker": 9}), r"knob worker must be in \[1, 2\], got 9"),
    (dict(tune=True, space={"cores": 2}), "space names an unknown knob 'cores'"),
    (dict(tune=True, tuning={"random": 3}), "unknown tuning option 'random'; known options: exploration_budget, initial_iterations"),
    (dict(tune=True, tuning={"initial_iterations": 0}), "initial_iterations must be an integer >= 1, got 0"),
    (dict(tune=True, tuning={"exploration_budget": -0.5}),
     "exploration_budget must be a fraction between 0 and 1, or None, got -0.5"),
    (dict(tune=True, tuning={"overhead_share": 0}), r"overhead_share must be a fraction > 0 and <= 1, or None, got 0"),
    (dict(tune=True, tuning=[1]), "tuning must be a dict of options, got list"),
    (dict(tune=True, tuning={"speed_prior": "yes"}), "speed_prior must be True or False, got 'yes'"),
    (dict(space={"worker": 1}), "space, extra_knobs and tuning apply only with tune=True, got tune=False"),
])
def test_bad_tuning_input_fails_before_training(cluster, db_path, kwargs, message):
    before = own_node_processes()
    with pytest.raises(ConfigurationError, match=message):
        SlowerLogR().run(db=db_path, cluster=cluster, quiet=True, **kwargs)
    assert own_node_processes() == before
