"""Starting and restarting nodes: forked from the fork server against one process per node, side by side.

    python benchmarks/node_restart.py [--nodes 4] [--repeats 3]

For each way of starting nodes, the script starts a cluster, restarts every
node at once for new thread pools (what a tuner switch of the thread knobs
does), then restarts one node, ``--repeats`` times, and prints the median
wall times and the ratio of one process per node to the fork server.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from tfonline.cluster import LocalCluster, NodeThreads


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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    forked = measure(True, args.nodes, args.repeats)
    spawned = measure(False, args.nodes, args.repeats)
    print(f"{'median wall time':<22}{'fork server':>12}{'process per node':>18}{'ratio':>8}")
    for name in forked:
        print(f"{name:<22}{forked[name]:>11.2f}s{spawned[name]:>17.2f}s{spawned[name] / forked[name]:>8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
