"""What the driver costs per iteration: plain between-graph training against a fixed tfonline run, side by side.

    python benchmarks/engine_overhead.py [--steps 6000] [--pairs 2] [--jobs mlp,logr,cnn] [--ps 1 --worker 3]

The plain loop is what a TensorFlow user writes by hand
(``tf.compat.v1``, ``replica_device_setter``, one thread and one session per
worker, ``Session.run([loss, train_op])``), on the same embedded cluster as
the tfonline run, with the job's own ``input_fn``, ``model_fn`` and
``optimizer_fn``. Each pair runs both, order alternated; the figure is the
median time per iteration after a warm-up, and their ratio. Target (issue
16): tfonline within 1.05x of the plain loop.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time

import numpy as np
import tensorflow as tf

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "examples"), os.path.join(HERE, "..")]

import tfonline  # noqa: E402
from tfonline import _graph  # noqa: E402
from tfonline._calls import run_retrying_aborts  # noqa: E402
from tfonline.placement import DEFAULT_PARTITION_MIN_BYTES  # noqa: E402
from tfonline.cluster import LocalCluster  # noqa: E402
from tfonline.repository import Repository  # noqa: E402

TARGET = 1.05
WARMUP = 0.2  # the first fifth of the iterations is left out of the pace


class MLP(tfonline.MLJobFramework):
    """A small MLP on generated data: the job of the issue's measurement."""

    target_loss = 1e-9  # never reached: the run ends at its step count
    smoothing_window = 20

    def input_fn(self, shard, num_shards):
        rng = np.random.default_rng(shard)
        x = rng.normal(size=(4096, 32)).astype(np.float32)
        y = (x[:, :1] > 0).astype(np.float32)
        return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32)

    def model_fn(self, features, labels):
        w1 = tf.compat.v1.get_variable("w1", [32, 64], initializer=tf.compat.v1.glorot_uniform_initializer())
        b1 = tf.compat.v1.get_variable("b1", [64], initializer=tf.compat.v1.zeros_initializer())
        w2 = tf.compat.v1.get_variable("w2", [64, 1], initializer=tf.compat.v1.glorot_uniform_initializer())
        b2 = tf.compat.v1.get_variable("b2", [1], initializer=tf.compat.v1.zeros_initializer())
        logits = tf.matmul(tf.nn.relu(tf.matmul(features, w1) + b1), w2) + b2
        return tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))

    def optimizer_fn(self):
        return tf.compat.v1.train.GradientDescentOptimizer(0.05)


def make_job(name: str):
    if name == "mlp":
        return MLP()
    if name == "logr":
        from logr import LogR
        job = LogR()
    elif name == "cnn":
        from cnn import CNN
        job = CNN()
    else:
        raise SystemExit(f"--jobs: expected mlp, logr or cnn, got {name!r}")
    job.target_loss = 1e-9
    return job


def pace(walls: list[float]) -> float:
    """Seconds per iteration after the warm-up, from the iterations' end times."""
    walls = sorted(walls)
    kept = walls[int(len(walls) * WARMUP):]
    return (kept[-1] - kept[0]) / (len(kept) - 1)


def plain(job, cluster: LocalCluster, ps: int, workers: int, steps: int, partitions: int = 0) -> float:
    """Plain between-graph asynchronous training: one graph, thread and session per worker.

    With ``partitions``, large variables are cut into that many row blocks by tfonline's own rule: to see what
    a finer cut than one block per ps node costs (why tfonline cuts again at a ps change instead).
    """
    rule = _graph.PartitioningRule(partitions, DEFAULT_PARTITION_MIN_BYTES) if partitions else None
    graphs, sessions, fetches = [], [], []
    for rank in range(workers):
        graph = tf.Graph()
        node = ps + rank
        with graph.as_default():
            setter = tf.compat.v1.train.replica_device_setter(
                ps_tasks=ps, ps_device="/job:node", worker_device=f"/job:node/task:{node}")
            with tf.compat.v1.device(setter):
                features, labels = tf.compat.v1.data.make_one_shot_iterator(job.input_fn(rank, workers)).get_next()
                with tf.compat.v1.variable_scope(tf.compat.v1.get_variable_scope(), use_resource=True,
                                                 custom_getter=rule.custom_getter if rule else None):
                    loss = job.model_fn(features, labels)
                step = tf.compat.v1.train.get_or_create_global_step()
                train = job.optimizer_fn().minimize(loss, global_step=step)
            init = tf.compat.v1.global_variables_initializer()
        config = tf.compat.v1.ConfigProto(device_filters=[f"/job:node/task:{n}" for n in [*range(ps), node]])
        session = tf.compat.v1.Session(cluster.target(node), graph=graph, config=config)
        graphs.append(graph)
        sessions.append(session)
        fetches.append((init, [loss, train]))
    sessions[0].run(fetches[0][0])
    walls: list[float] = []
    lock = threading.Lock()

    def work(rank: int) -> None:
        session, fetch = sessions[rank], fetches[rank][1]
        for _ in range(steps // workers):
            # As tfonline does, and MonitoredSession: an aborted asynchronous step is run again (TensorFlow
            # sometimes aborts one here, "the same RunGraph request was received twice").
            run_retrying_aborts(lambda: session.run(fetch))
            with lock:
                walls.append(time.perf_counter())

    threads = [threading.Thread(target=work, args=(rank,)) for rank in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for session in sessions:
        session.close()
    for node in range(cluster.node_count):  # the next run starts from nothing
        tf.compat.v1.Session.reset(cluster.target(node), [])
    return pace(walls)


def fixed(job, cluster: LocalCluster, ps: int, workers: int, steps: int, db: str) -> float:
    """A fixed tfonline run of the same layout; its pace from the repository's iteration times."""
    result = job.run(setting={"ps": ps, "worker": workers}, db=db, cluster=cluster, max_steps=steps, quiet=True,
                     patience=None)
    repo = Repository(db)
    try:
        walls = [r["wall_time"] for r in repo.rows("select wall_time from iterations where job_id = ?",
                                                   (result.job_id,))]
    finally:
        repo.close()
    return pace(walls)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6000)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--jobs", default="mlp,logr,cnn")
    parser.add_argument("--ps", type=int, default=1)
    parser.add_argument("--worker", type=int, default=3)
    parser.add_argument("--blocks", type=int, default=0,
                        help="also run the plain loop with large variables cut into this many row blocks")
    args = parser.parse_args(argv)
    folder = tempfile.mkdtemp(prefix="tfonline-overhead-")
    print(f"{'job':6} {'plain ms/it':>12} {'tfonline ms/it':>15} {'ratio':>7}  target <= {TARGET}x"
          + (f"   plain, {args.blocks} blocks ms/it" if args.blocks else ""))
    with LocalCluster(args.ps + args.worker) as cluster:
        for name in args.jobs.split(","):
            job = make_job(name)
            ours, theirs, cut = [], [], []
            for pair in range(args.pairs):
                runs = [lambda: theirs.append(plain(job, cluster, args.ps, args.worker, args.steps)),
                        lambda: ours.append(fixed(job, cluster, args.ps, args.worker, args.steps,
                                                      os.path.join(folder, f"{name}.db")))]
                if args.blocks:
                    runs.append(lambda: cut.append(plain(job, cluster, args.ps, args.worker, args.steps,
                                                         args.blocks)))
                for run in runs if pair % 2 == 0 else runs[::-1]:
                    run()
            a, b = statistics.median(theirs), statistics.median(ours)
            print(f"{name:6} {1e3 * a:12.3f} {1e3 * b:15.3f} {b / a:7.2f}x  (pairs: "
                  + ", ".join(f"{y / x:.2f}" for x, y in zip(theirs, ours)) + ")"
                  + (f"   {1e3 * statistics.median(cut):.3f}" if cut else ""), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
