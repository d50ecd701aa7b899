"""Nothing tfonline starts accepts connections from beyond this host, and nodes get no secrets."""

from __future__ import annotations

import errno
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest

from tfonline.cluster import LocalCluster
from tfonline.exceptions import ConfigurationError


def listening(pid: int) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket process ``pid`` listens on, as ``ss`` (iproute2) shows them."""
    if shutil.which("ss") is None:
        pytest.skip("ss (iproute2) is not installed")
    out = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        if f"pid={pid}," not in line:
            continue
        local = line.split()[3]  # State Recv-Q Send-Q Local:Port Peer:Port Process
        address, port = local.rsplit(":", 1)
        found.append((address.strip("[]"), int(port)))
    return found


def port_of(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def test_every_node_listens_on_loopback_only(cluster):
    for pid, address in zip(cluster.node_pids, cluster.addresses):
        assert listening(pid) == [("127.0.0.1", port_of(address))], f"node pid {pid}"


class NetworkNamespace:
    """A network namespace joined to this one by a veth pair: another host, as far as sockets can tell.

    The addresses are made up here (a /30 from the 10.0.0.0/8 block) and exist only on the two ends of
    the pair, which is removed with the namespace.
    """

    def __init__(self):
        tag = uuid.uuid4().hex[:6]
        self.name, self.here_end, self.there_end = f"tfo{tag}", f"tfoh{tag}", f"tfon{tag}"
        self.host_address, self.guest_address = "10.213.77.1", "10.213.77.2"

    def __enter__(self):
        if os.geteuid() != 0 or shutil.which("ip") is None:
            pytest.skip("making a network namespace needs root and iproute2's ip")
        try:
            for args in (["netns", "add", self.name],
                         ["link", "add", self.here_end, "type", "veth", "peer", "name", self.there_end],
                         ["link", "set", self.there_end, "netns", self.name],
                         ["addr", "add", f"{self.host_address}/30", "dev", self.here_end],
                         ["link", "set", self.here_end, "up"],
                         ["-n", self.name, "addr", "add", f"{self.guest_address}/30", "dev", self.there_end],
                         ["-n", self.name, "link", "set", self.there_end, "up"],
                         ["-n", self.name, "link", "set", "lo", "up"]):
                out = subprocess.run(["ip", *args], capture_output=True, text=True)
                if out.returncode != 0:
                    raise OSError(f"ip {' '.join(args)}: {out.stderr.strip()}")
        except OSError as e:
            self.__exit__()
            pytest.skip(f"cannot make a network namespace here: {e}")
        return self

    def __exit__(self, *exc):
        subprocess.run(["ip", "link", "del", self.here_end], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)

    def connects(self, port: int) -> bool:
        """Whether a TCP connection from inside the namespace to this host's end, at ``port``, is accepted."""
        code = ("import socket, sys\n"
                "s = socket.socket(); s.settimeout(3)\n"
                "sys.exit(s.connect_ex((sys.argv[1], int(sys.argv[2]))))\n")
        out = subprocess.run(["ip", "netns", "exec", self.name, sys.executable, "-c", code, self.host_address,
                              str(port)], capture_output=True, text=True, timeout=30)
        return out.returncode == 0


def test_a_connection_from_another_network_namespace_is_refused(cluster):
    """The cluster's nodes refuse the other host; a node told to listen on every interface (the control: the
    same server, unconfined) and a plain socket on every interface are reached from it."""
    with LocalCluster(2, host="0.0.0.0") as wide:
        open_port = port_of(wide.addresses[0])
        assert listening(wide.node_pids[0]) in ([("*", open_port)], [("0.0.0.0", open_port)])
        with NetworkNamespace() as other_host:
            assert other_host.connects(open_port)
            with socket.socket() as control:
                control.bind(("0.0.0.0", 0))
                control.listen()
                assert other_host.connects(control.getsockname()[1])
            for address in cluster.addresses:
                assert not other_host.connects(port_of(address)), address


def test_nodes_get_the_environment_they_need_and_no_secret(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "do-not-leak")
    monkeypatch.setenv("TFONLINE_TEST_TOKEN", "do-not-leak")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # a math library's knob: passed on
    with LocalCluster(2, env={"MY_SETTING": "given"}) as c:
        envs = []
        for pid in [*c.node_pids, c.fork_server_pid]:
            with open(f"/proc/{pid}/environ", "rb") as f:
                envs.append(dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item))
    for env in envs:
        assert b"AWS_SECRET_ACCESS_KEY" not in env and b"TFONLINE_TEST_TOKEN" not in env
        assert b"do-not-leak" not in b"".join(env.values())
        assert env[b"MY_SETTING"] == b"given" and env[b"OMP_NUM_THREADS"] == b"1"
        assert env[b"PATH"] == os.environ["PATH"].encode()
        assert env[b"TFONLINE_BIND_ADDRESS"] == b"127.0.0.1"


@pytest.mark.parametrize("kwargs, message", [
    ({"host": "localhost"}, "host must be an IP address of this host such as 127.0.0.1, got 'localhost'"),
    ({"host": "192.0.2.1"}, "host must be an address of this host, got '192.0.2.1': Cannot assign requested address"),
    ({"env": {"A": 1}}, r"env must be a dict of str to str, got \{'A': 1\}"),
    ({"heartbeat_timeout_s": 0}, "heartbeat_timeout_s must be a number > 0, got 0"),
])
def test_bad_cluster_options(kwargs, message):
    with pytest.raises(ConfigurationError, match=message):
        LocalCluster(2, **kwargs)


def test_no_other_program_can_take_a_nodes_port(cluster):
    """Each node's port is held by the cluster: another bind fails now, and while the node restarts."""
    index = 2
    port = port_of(cluster.addresses[index])
    stop, took, refusals = threading.Event(), [], []

    def try_to_take():  # records what happened: an assert in this thread would not reach pytest
        while not stop.is_set():
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                    took.append(port)
                except OSError as e:
                    refusals.append(e.errno)
            time.sleep(0.001)

    thief = threading.Thread(target=try_to_take)
    thief.start()
    try:
        cluster.restart_node(index)
    finally:
        stop.set()
        thief.join()
    assert took == []
    assert refusals and set(refusals) == {errno.EADDRINUSE}  # tried throughout, refused as "in use" each time
    assert listening(cluster.node_pids[index]) == [("127.0.0.1", port)]


def _node_command(addresses, index, *extra):
    return [sys.executable, "-m", "tfonline.cli", "node", "--cluster", ",".join(addresses), "--index", str(index),
            *extra]


@pytest.mark.parametrize("bind, message", [
    ("somewhere", "--bind must be an IP address of this host such as 127.0.0.1, got 'somewhere'"),
    ("192.0.2.7", "--bind must be an address of this host, got '192.0.2.7': Cannot assign requested address"),
])
def test_tfonline_node_refuses_a_bind_address_it_cannot_use(bind, message):
    out = subprocess.run(_node_command(["127.0.0.1:1", "127.0.0.1:2"], 0, "--bind", bind), capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 1
    assert out.stderr.strip() == f"tfonline: error: {message}"


def test_tfonline_node_help_says_what_an_open_node_means():
    out = subprocess.run([sys.executable, "-m", "tfonline.cli", "node", "--help"], capture_output=True, text=True,
                         timeout=60)
    text = re.sub(r"\s+", " ", out.stdout)
    assert "no authentication" in text and "run any TensorFlow operation" in text
    assert "127.0.0.1 by default" in text and "trusted, isolated network" in text
