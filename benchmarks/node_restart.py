"""Starting and restarting nodes: forked from the fork server against one process per node, side by side,
and the nodes of a given cluster (``tfonline node``), which restart themselves when asked.

    python benchmarks/node_restart.py [--nodes 4] [--repeats 3]

For each way of starting nodes, the script starts a cluster, restarts every
node at once for new thread pools (what a tuner switch of the thread knobs
does), then restarts one node, ``--repeats`` times, and prints the median
wall times and the ratio of one process per node to the fork server. A
given cluster's "start" is its nodes' start, each a ``tfonline node``
process; its restarts go through :meth:`tfonline.given_cluster.ExistingCluster.set_threads_of`,
as a job's switch does. Last, the start of a cluster whose fork server was
kept from the one before (:func:`tfonline.cluster.keep_fork_servers`), the
median of ``--repeats`` such starts after a first one that pays the import.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

from tfonline.cluster import LocalCluster, NodeThreads, free_port, keep_fork_servers
from tfonline.given_cluster import ExistingCluster


def measure(fork_server: bool, nodes: int, repeats: int) -> dict[str, float]:
    times: dict[str, list[float]] = {"start": [], f"restart {nodes} nodes": [], "restart 1 node": []}
    for _ in range(repeats):
        started = time.monotonic()
        with LocalCluster(nodes, fork_server=fork_server) as cluster:
            times["start"].append(time.monotonic() - started)
            for pools in (NodeThreads(1, 1), NodeThreads(1, 2)):
                started = time.monotonic()
                cluster.set_threads_of({i: pools for i in range(nodes)})
                times[f"restart {nodes} nodes"].append(time.monotonic() - started)
            times["restart 1 node"].append(cluster.restart_node(0))
    return {name: statistics.median(values) for name, values in times.items()}


def measure_kept(nodes: int, repeats: int) -> tuple[float, float]:
    """The first cluster's start inside a keep_fork_servers() block, and the median start of the next ``repeats``."""
    times = []
    with keep_fork_servers():
        for _ in range(repeats + 1):
            started = time.monotonic()
            with LocalCluster(nodes):
                times.append(time.monotonic() - started)
    return times[0], statistics.median(times[1:])


def measure_given(nodes: int, repeats: int) -> dict[str, float]:
    times: dict[str, list[float]] = {"start": [], f"restart {nodes} nodes": [], "restart 1 node": []}
    for _ in range(repeats):
        addresses = [f"127.0.0.1:{free_port()}" for _ in range(nodes)]
        started = time.monotonic()
        procs = [subprocess.Popen([sys.executable, "-m", "tfonline.cli", "node", "--cluster", ",".join(addresses),
                                   "--index", str(i)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                 for i in range(nodes)]
        try:
            for proc in procs:
                assert json.loads(proc.stdout.readline())["event"] == "serving"
            times["start"].append(time.monotonic() - started)
            cluster = ExistingCluster(addresses)
            for pools in (NodeThreads(1, 1), NodeThreads(1, 2)):
                started = time.monotonic()
                cluster.set_threads_of({i: pools for i in range(nodes)})
                times[f"restart {nodes} nodes"].append(time.monotonic() - started)
            started = time.monotonic()
            cluster.set_threads_of({0: NodeThreads(2, 2)})
            times["restart 1 node"].append(time.monotonic() - started)
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(timeout=30)
    return {name: statistics.median(values) for name, values in times.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    forked = measure(True, args.nodes, args.repeats)
    spawned = measure(False, args.nodes, args.repeats)
    given = measure_given(args.nodes, args.repeats)
    print(f"{'median wall time':<22}{'fork server':>12}{'process per node':>18}{'ratio':>8}{'given (tfonline node)':>23}")
    for name in forked:
        print(f"{name:<22}{forked[name]:>11.2f}s{spawned[name]:>17.2f}s{spawned[name] / forked[name]:>8.1f}"
              f"{given[name]:>22.2f}s")
    first, kept = measure_kept(args.nodes, args.repeats)
    print(f"start with the fork server kept from the cluster before: {kept:.2f}s (the first: {first:.2f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
