"""TensorFlow's TF_CONFIG convention: the driver's cluster and each node's place in it, from the environment."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from jobs import TinyLogR

from tfonline import tf_config
from tfonline.exceptions import ConfigurationError

# No test here reaches a node; all but the command's (a process each, about 1 s) are in `pytest -m fast`.

CLUSTER = {"worker": ["w0:1", "w1:1"], "evaluator": ["e:1"], "ps": ["p0:1", "p1:1"], "chief": ["c:1"]}


def env(task=None, cluster=CLUSTER):
    return {"TF_CONFIG": json.dumps({"cluster": cluster, **({"task": task} if task else {})})}


@pytest.mark.fast
def test_the_cluster_is_one_list_chief_ps_worker_then_the_others_and_each_task_finds_its_place():
    order = ["c:1", "p0:1", "p1:1", "w0:1", "w1:1", "e:1"]
    assert tf_config.addresses(env()) == order
    for place, (kind, index) in enumerate([("chief", 0), ("ps", 0), ("ps", 1), ("worker", 0), ("worker", 1),
                                           ("evaluator", 0)]):
        assert tf_config.node_index(env({"type": kind, "index": index})) == place
        assert order[place] == CLUSTER[kind][index]


@pytest.mark.fast
@pytest.mark.parametrize("environ, message", [
    ({}, "the TF_CONFIG environment variable must hold the cluster (JSON), got none set"),
    ({"TF_CONFIG": "{cluster"}, "TF_CONFIG must be JSON, got '{cluster': Expecting property name"),
    ({"TF_CONFIG": "{}"}, "TF_CONFIG must name a cluster ({\"cluster\": {\"worker\": [\"host:port\", ...]}}), got '{}'"),
    ({"TF_CONFIG": '{"cluster": {"worker": "a:1"}}'},
     "TF_CONFIG's cluster must map each task type to a list of 'host:port', got worker='a:1'"),
])
def test_a_bad_tf_config_is_one_line(environ, message):
    with pytest.raises(ConfigurationError) as e:
        tf_config.addresses(environ)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


@pytest.mark.fast
def test_a_node_whose_task_is_missing_or_not_in_the_cluster_is_told_so():
    with pytest.raises(ConfigurationError, match=r"^TF_CONFIG must name this node's task \(\{\"type\": \"worker\", "
                                                 r"\"index\": 0\}\), got task=None$"):
        tf_config.node_index(env())
    with pytest.raises(ConfigurationError, match=r"^TF_CONFIG's task worker:2 is not in its cluster \(worker: 2, "
                                                 r"evaluator: 1, ps: 2, chief: 1\)$"):
        tf_config.node_index(env({"type": "worker", "index": 2}))


@pytest.mark.fast
def test_run_with_cluster_tf_config_and_none_set_fails_before_anything_starts(db_path, monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(ConfigurationError,
                       match=r"^the TF_CONFIG environment variable must hold the cluster \(JSON\), got none set$"):
        TinyLogR().run(db=db_path, cluster="TF_CONFIG", quiet=True)
    import os

    assert not os.path.exists(db_path)  # refused before the repository was opened


@pytest.mark.parametrize("args, environ, message", [
    (["--tf-config", "--index", "0"], env({"type": "ps", "index": 0}), "--tf-config replaces --cluster and --index, got both"),
    (["--index", "0"], {}, "node needs --cluster and --index, or --tf-config, got one of them"),
    ([], {}, "node needs --cluster and --index, or --tf-config, got neither"),
    (["--tf-config"], env({"type": "ps", "index": 5}), "TF_CONFIG's task ps:5 is not in its cluster"),
])
def test_tfonline_node_reads_tf_config_and_its_bad_input_is_one_line(args, environ, message):
    """The command's own checks; TF_CONFIG's messages are the functions' (tested above), reached as the last
    case reaches one."""
    out = subprocess.run([sys.executable, "-m", "tfonline.cli", "node", *args], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", **environ}, timeout=60)
    assert out.returncode == 1
    assert out.stderr.strip().startswith(f"tfonline: error: {message}") and len(out.stderr.strip().splitlines()) == 1
