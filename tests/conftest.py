from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture(scope="session", autouse=True)
def children_write_their_temporary_files_in_the_sessions_folder(tmp_path_factory):
    """The processes the tests start (drivers, nodes) write their temporary files under the session's folder,
    which pytest prunes: a driver a test kills with SIGKILL cannot remove them (TensorFlow's autograph modules
    are removed at exit), and each ``make test`` left two to four ``__autograph_generated_file*.py`` in /tmp.

    The tests' own process writes there too (:mod:`tempfile` caches its folder): with ``make test``'s two
    pytest workers (pytest-xdist), each has its own, so a test that counts what a job left in the temporary
    folder sees only its own worker's files."""
    before, cached = os.environ.get("TMPDIR"), tempfile.tempdir
    os.environ["TMPDIR"] = tempfile.tempdir = str(tmp_path_factory.mktemp("children-tmp"))
    yield
    tempfile.tempdir = cached
    if before is None:
        del os.environ["TMPDIR"]
    else:
        os.environ["TMPDIR"] = before


@pytest.fixture(scope="session", autouse=True)
def kept_fork_servers(children_write_their_temporary_files_in_the_sessions_folder):
    """Every cluster a test starts in this process takes a kept fork server (:func:`tfonline.cluster.keep_fork_servers`)
    instead of importing TensorFlow anew (about 7 s of CPU a cluster; the whole suite saved about 0.5 CPU-minutes).
    The tests of the fork server's own life (its death fails a job; a job's end stops its nodes) hold all the
    same: a dead server is not kept, and the kept ones are no test's leftovers (:func:`node_processes` leaves
    them out). After the fixture, the session's kept fork servers are stopped."""
    from tfonline.cluster import keep_fork_servers

    with keep_fork_servers() as kept:
        _kept.append(kept)
        yield kept
        _kept.remove(kept)


_kept: list = []  # the session's KeptForkServers, while the fixture above holds it


@pytest.fixture(scope="session")
def cluster():
    """One real local cluster of 3 TensorFlow server nodes for the whole session."""
    from tfonline.cluster import LocalCluster

    with LocalCluster(3) as c:
        yield c


@pytest.fixture
def db_path(tmp_path):
    return str(tmp_path / "runs.db")


@pytest.fixture
def tmpfs(tmp_path):
    """``tmpfs(size)`` mounts a small tmpfs folder for the test and returns it; all are unmounted after.

    Root only (skipped with the reason elsewhere): a full or read-only file system is the only honest
    way to test what a job does on one, and file modes do not stop root.
    """
    mounted = []

    def mount(size: str = "4m", name: str = "mnt"):
        if os.geteuid() != 0:
            pytest.skip("mounting a tmpfs needs root")
        folder = tmp_path / f"{name}{len(mounted)}"
        folder.mkdir()
        out = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                             capture_output=True, text=True)
        if out.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {out.stderr.strip()}")
        mounted.append(folder)
        return folder

    yield mount
    for folder in mounted:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


@pytest.fixture
def read_only(tmpfs):
    """``read_only(path)`` returns a read-only copy of the closed SQLite file ``path`` (and of its folder)."""

    def make(path: str) -> str:
        if os.geteuid() != 0:
            os.chmod(path, 0o444)
            return path
        folder = tmpfs("1m", "ro")
        copy = str(folder / os.path.basename(path))
        shutil.copy(path, copy)
        out = subprocess.run(["mount", "-o", "remount,ro", str(folder)], capture_output=True, text=True)
        if out.returncode != 0:
            pytest.skip(f"cannot remount a tmpfs read-only here: {out.stderr.strip()}")
        return copy

    return make


def node_processes(parent: int | None = None) -> set[int]:
    """Pids of live tfonline node processes and fork servers (descendants of ``parent`` if given), but for the
    fork servers kept idle between clusters (:func:`kept_fork_servers`)."""
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
    for kept in _kept:
        live -= kept.pids
    if parent is None:
        return live

    def descends(pid: int) -> bool:
        while pid > 1:
            pid = parents.get(pid, 0)
            if pid == parent:
                return True
        return False

    return {pid for pid in live if descends(pid)}


def own_node_processes() -> set[int]:
    """Pids of the live node processes and fork servers this pytest process started, orphans included.

    Every node inherits ``TMPDIR``, the session's own folder (the fixture above; tfonline passes it on): a
    test that counts what it left compares this before and after. ``make test`` runs two pytest workers side
    by side, so the machine-wide :func:`node_processes` sees the other's nodes come and go, and the
    descendants of ``os.getpid()`` miss a node whose fork server died before it (it is no one's child then)."""
    ours, own = b"TMPDIR=" + os.fsencode(os.environ["TMPDIR"]), set()
    for pid in node_processes():
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if ours in f.read().split(b"\0"):
                    own.add(pid)
        except OSError:
            continue  # gone meanwhile
    return own


def after_iterations(db, n, then, timeout_s=120, count="select count(*) from iterations"):
    """Calls ``then()`` from a thread once the job in ``db`` has recorded ``n`` iterations (or ``n`` of what the
    query ``count`` counts); returns the thread and a list that gets the time it was called."""
    called = []

    def wait():
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if sqlite3.connect(db).execute(count).fetchone()[0] >= n:
                    called.append(time.monotonic())
                    then()
                    return
            except sqlite3.OperationalError:
                pass  # not created yet
            time.sleep(0.05)

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    return thread, called
