from __future__ import annotations

import os
import sys

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture(scope="session")
def cluster():
    """One real local cluster of 3 TensorFlow server nodes for the whole session."""
    from tfonline.cluster import LocalCluster

    with LocalCluster(3) as c:
        yield c


@pytest.fixture
def db_path(tmp_path):
    return str(tmp_path / "runs.db")


def node_processes(parent: int | None = None) -> set[int]:
    """Pids of live tfonline node processes and fork servers (descendants of ``parent`` if given)."""
    live, parents = set(), {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ")
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
        if b"tfonline._node" in cmdline and fields[0] != "Z":
            live.add(int(entry))
    if parent is None:
        return live

    def descends(pid: int) -> bool:
        while pid > 1:
            pid = parents.get(pid, 0)
            if pid == parent:
                return True
        return False

    return {pid for pid in live if descends(pid)}
