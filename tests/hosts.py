"""Hosts for multi-host tests on one machine: network namespaces on a bridge, each running a ``tfonline node``.

A network namespace has its own interfaces, addresses, ports and routes: to
sockets it is another host. :class:`Hosts` makes ``count`` of them, each
joined by a veth pair to one bridge in this namespace (the driver's), with
an address of a made-up /24 (10.216.X.0, X drawn per harness) that only
they and the bridge hold. :meth:`Hosts.start_nodes` starts ``tfonline node
--tf-config`` in each, bound to its own address, with the same ``TF_CONFIG``
a driver then passes as ``run(cluster="TF_CONFIG")``.

Everything it makes it removes on exit, also when the body raised or the
making failed halfway: the node processes (a namespace's processes outlive
``ip netns del``), then the namespaces, the veth pairs and the bridge.
``Hosts(rate="200mbit")`` limits each host's link, both ways, with a token
bucket (``tc tbf``; this kernel has no ``netem``, so no added latency).
Making them needs root and iproute2's ``ip``; where they cannot be made,
:class:`HostsUnavailable` says why (tests skip with that reason).
"""

from __future__ import annotations

import json
import os
import random
import select
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

NODE_PORT = 2222  # every host's node listens on the same port, as on real machines
START_TIMEOUT_S = 120.0


def _free_subnet() -> str:
    """A made-up 10.216.X /24 that no interface here holds: two pytest workers may each have hosts up."""
    try:
        held = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
    except OSError:  # no ip: Hosts.__enter__ says so
        held = ""
    free = [x for x in range(256) if f" 10.216.{x}." not in held] or range(256)
    return f"10.216.{random.choice(free)}"


class HostsUnavailable(RuntimeError):
    """Network namespaces cannot be made here (not root, no ``ip``, or the kernel refused)."""


def _ip(*args: str) -> None:
    out = subprocess.run(["ip", *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise HostsUnavailable(f"ip {' '.join(args)}: {out.stderr.strip()}")


def _limit(prefix: list[str], device: str, rate: str) -> None:
    """A token bucket on ``device``'s egress: at most ``rate``, packets queued up to 50 ms. Its bucket holds
    1 MB: a smaller one cannot reach a gigabit rate with the kernel's timer (tbf refills once per tick)."""
    out = subprocess.run([*prefix, "tc", "qdisc", "add", "dev", device, "root", "tbf", "rate", rate,
                          "burst", "1mb", "latency", "50ms"], capture_output=True, text=True)
    if out.returncode != 0:
        raise HostsUnavailable(f"tc qdisc add dev {device} root tbf rate {rate}: {out.stderr.strip()}")


class Hosts:
    """``count`` network namespaces on one bridge: ``addresses[i]`` is host i's, ``bridge_address`` this one's."""

    def __init__(self, count: int = 3, rate: str | None = None):
        self.rate = rate  # each host's link, both ways, e.g. "200mbit" (tc's token bucket), or unlimited
        tag = uuid.uuid4().hex[:5]
        subnet = _free_subnet()
        self.bridge, self.bridge_address = f"tfob{tag}", f"{subnet}.1"
        self.namespaces = [f"tfo{tag}{i}" for i in range(count)]
        self.links = [f"tfoh{tag}{i}" for i in range(count)]  # this namespace's ends (on the bridge)
        self.addresses = [f"{subnet}.{i + 2}" for i in range(count)]
        self.processes: list[subprocess.Popen] = []  # everything started on the hosts, nodes included
        self.logs: list = []  # the nodes' stderr
        self.nodes: list[subprocess.Popen] = []
        self.tf_config = ""

    def __enter__(self) -> Hosts:
        if os.geteuid() != 0 or shutil.which("ip") is None:
            raise HostsUnavailable("network namespaces need root and iproute2's ip")
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            _ip("addr", "add", f"{self.bridge_address}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for namespace, link, address in zip(self.namespaces, self.links, self.addresses):
                guest = "eth0"
                _ip("netns", "add", namespace)
                _ip("link", "add", link, "type", "veth", "peer", "name", f"{link}g")
                _ip("link", "set", f"{link}g", "netns", namespace)
                _ip("-n", namespace, "link", "set", f"{link}g", "name", guest)
                _ip("link", "set", link, "master", self.bridge)
                _ip("link", "set", link, "up")
                _ip("-n", namespace, "addr", "add", f"{address}/24", "dev", guest)
                _ip("-n", namespace, "link", "set", guest, "up")
                _ip("-n", namespace, "link", "set", "lo", "up")
                if self.rate is not None:
                    _limit([], link, self.rate)  # towards the host
                    _limit(["ip", "netns", "exec", namespace], guest, self.rate)  # from it
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self, index: int, argv: list[str], **popen) -> subprocess.Popen:
        """Starts ``argv`` on host ``index`` (in its namespace); it is stopped with the hosts."""
        process = subprocess.Popen(["ip", "netns", "exec", self.namespaces[index], *argv], **popen)
        self.processes.append(process)
        return process

    def node_addresses(self) -> list[str]:
        return [f"{address}:{NODE_PORT}" for address in self.addresses]

    def start_nodes(self, env: dict[str, str] | None = None) -> str:
        """Starts a ``tfonline node --tf-config`` on every host, each bound to its own address; waits until
        each serves and returns the ``TF_CONFIG`` they share (the first host's node listed as the chief)."""
        addresses = self.node_addresses()
        cluster = {"chief": addresses[:1], "worker": addresses[1:]}
        tasks = [{"type": "chief", "index": 0}] + [{"type": "worker", "index": i} for i in range(len(addresses) - 1)]
        self.tf_config = json.dumps({"cluster": cluster})
        for index, task in enumerate(tasks):
            node_env = dict(env or os.environ, TF_CONFIG=json.dumps({"cluster": cluster, "task": task}),
                            TF_CPP_MIN_LOG_LEVEL="2")
            log = tempfile.TemporaryFile("w+")  # not a pipe: a node's warnings must never fill one and block it
            self.logs.append(log)
            self.nodes.append(self.start(index, [sys.executable, "-m", "tfonline.cli", "node", "--tf-config",
                                               "--bind", self.addresses[index]],
                                       env=node_env, stdout=subprocess.PIPE, stderr=log, text=True))
        deadline = time.monotonic() + START_TIMEOUT_S
        for index, node in enumerate(self.nodes):
            line = ""
            while '"serving"' not in line:  # a node prints one line on stdout: its server, once it serves
                ready, _, _ = select.select([node.stdout], [], [], max(0.0, deadline - time.monotonic()))
                line = node.stdout.readline() if ready else ""
                if not line:
                    self.logs[index].seek(0)
                    raise RuntimeError(f"the node on host {index} did not start within {START_TIMEOUT_S:.0f} s "
                                       f"(exit code {node.poll()}): {self.logs[index].read()[-500:]}")
        return self.tf_config

    def cut(self, index: int) -> None:
        """Cuts host ``index``'s link: its node runs on and answers nobody, as a host whose network failed."""
        _ip("link", "set", self.links[index], "down")

    def stop_processes(self) -> None:
        """Ends everything started on the hosts: SIGTERM, then SIGKILL after 10 s."""
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            for stream in (process.stdin, process.stdout, process.stderr):
                if stream is not None:
                    stream.close()
        for log in self.logs:
            log.close()
        self.processes, self.nodes, self.logs = [], [], []

    def close(self) -> None:
        """Stops what runs on the hosts, then removes the namespaces, the veth pairs and the bridge; each step
        whatever the others did."""
        try:
            self.stop_processes()
        finally:
            for namespace in self.namespaces:
                subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
            for link in self.links:
                subprocess.run(["ip", "link", "del", link], capture_output=True)
            subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)

    def leftovers(self) -> list[str]:
        """What of this harness still exists: namespaces and links by name (none after :meth:`close`)."""
        netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
        return ([n for n in self.namespaces if n in netns]
                + [name for name in self.links + [self.bridge] if f" {name}:" in links or f" {name}@" in links])
