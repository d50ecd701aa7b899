"""Model-selection sweeps: one job class, a grid of its attributes, one job after another on one cluster."""

from __future__ import annotations

import sqlite3

import pytest
from jobs import TinyLogR

import tfonline
from tfonline.exceptions import ConfigurationError
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
