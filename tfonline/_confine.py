"""How tfonline confines the TensorFlow servers it starts.

A TensorFlow server accepts any client that reaches its port and runs
whatever graph it is sent, as the user, with no authentication. TensorFlow
always listens on every interface (it asks gRPC for ``0.0.0.0:PORT``), so
tfonline confines its node processes itself:

- **The address.** Node processes run with the library built from
  ``patches/bind_address.c`` preloaded and ``TFONLINE_BIND_ADDRESS`` set:
  TensorFlow's wildcard bind becomes a bind to that one address (loopback
  unless the user asks for another). After a node serves, the cluster reads
  the kernel's table of listening sockets and fails if the node's port is
  open on any other address (:func:`check_listening`).
- **The environment.** A node gets the variables it needs to run Python and
  TensorFlow (:data:`NODE_ENV_NAMES`, :data:`NODE_ENV_PREFIXES`) and those
  the user names, not a copy of the driver's: a token in the driver's
  environment does not reach a process that serves the network.
- **The port.** The driver reserves each node's port for the cluster's
  lifetime (:func:`reserve_port`): a socket bound with ``SO_REUSEPORT`` that
  never listens. The node's server binds the same port with ``SO_REUSEPORT``
  too (``TF_GRPC_REUSE_PORT=1``), and any other process is refused, so no
  other program can take a port between its choice and the node's start,
  nor while a node restarts for new thread pools.
"""

from __future__ import annotations

import glob
import ipaddress
import os
import socket

from tfonline.exceptions import ClusterError, ConfigurationError

LOOPBACK = "127.0.0.1"
BIND_VARIABLE = "TFONLINE_BIND_ADDRESS"

# What a node process needs of the driver's environment: to find Python and
# its packages, the locale and temporary directory, and the variables that
# tune TensorFlow and its math libraries.
NODE_ENV_NAMES = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TMP", "TEMP",
    "PYTHONPATH", "PYTHONHOME", "PYTHONHASHSEED", "VIRTUAL_ENV", "LD_LIBRARY_PATH", "LD_PRELOAD",
})
NODE_ENV_PREFIXES = ("LC_", "TF_", "XLA_", "CUDA_", "NVIDIA_", "OMP_", "KMP_", "MKL_", "OPENBLAS_")


def is_wildcard(address: str) -> bool:
    """Whether ``address`` means every interface (listening there is the user's explicit choice)."""
    return address in ("", "0.0.0.0", "::", "*")


def check_bind_address(address: str, what: str = "bind") -> str:
    """Returns ``address`` if it is an IP address of this host (or a wildcard); raises a one-line error if not."""
    if not isinstance(address, str):
        raise ConfigurationError(f"{what} must be an IP address of this host such as {LOOPBACK}, got {address!r}")
    if is_wildcard(address):
        return address
    try:
        family = socket.AF_INET6 if ipaddress.ip_address(address).version == 6 else socket.AF_INET
    except ValueError:
        raise ConfigurationError(
            f"{what} must be an IP address of this host such as {LOOPBACK}, got {address!r}") from None
    with socket.socket(family, socket.SOCK_STREAM) as s:
        try:
            s.bind((address, 0))
        except OSError as e:
            raise ConfigurationError(f"{what} must be an address of this host, got {address!r}: {e.strerror}") from None
    return address


def bind_library() -> str | None:
    """The path of the preloadable library built from ``patches/bind_address.c``, or None if it was not built."""
    here = os.path.dirname(os.path.abspath(__file__))
    found = sorted(glob.glob(os.path.join(here, "_bind_address*.so")))
    return found[0] if found else None


def confined_environment(source: dict[str, str], bind: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a node process: what it needs of ``source``, plus ``extra``, confined to ``bind``.

    Raises:
        ClusterError: ``bind`` is one address but the bind library was not built.
    """
    env = {k: v for k, v in source.items() if k in NODE_ENV_NAMES or k.startswith(NODE_ENV_PREFIXES)}
    env.update(extra or {})
    env["TF_GRPC_REUSE_PORT"] = "1"  # the node binds the port the driver holds reserved
    return bound_to(env, bind)


def bound_to(env: dict[str, str], bind: str) -> dict[str, str]:
    """``env`` with the bind library preloaded and set to ``bind`` (unchanged but for that, and for a wildcard).

    Raises:
        ClusterError: ``bind`` is one address but the bind library was not built.
    """
    env = {k: v for k, v in env.items() if k != BIND_VARIABLE}
    if is_wildcard(bind):
        return env
    library = bind_library()
    if library is None:
        raise ClusterError(
            "tfonline's bind library (tfonline/_bind_address*.so, built from patches/bind_address.c by "
            "pip install) is missing, so nodes would listen on every interface; reinstall tfonline where a C "
            "compiler is available"
        )
    preload = [p for p in env.get("LD_PRELOAD", "").split() if p != library]
    env["LD_PRELOAD"] = " ".join([library, *preload])
    env[BIND_VARIABLE] = bind
    return env


def reserve_port(host: str) -> socket.socket:
    """A socket that holds a free port of ``host`` for a node (see the module's docstring); close it to free it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        s.bind(("::" if host == "::" else "0.0.0.0" if is_wildcard(host) else host, 0))
    except OSError:
        s.close()
        raise
    return s


def listening_addresses(pid: int | None = None, port: int | None = None) -> list[tuple[str, int]]:
    """The (address, port) pairs TCP sockets listen on: those of process ``pid`` (all when None), at ``port``
    (any when None). Read from the kernel's tables (``/proc/net/tcp``, ``/proc/net/tcp6``)."""
    owned = _socket_inodes(pid) if pid is not None else None
    found = []
    for path, width in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 16)):
        try:
            with open(path) as f:
                next(f)
                rows = [line.split() for line in f]
        except OSError:
            continue
        for row in rows:
            address_hex, port_hex = row[1].split(":")
            if row[3] != "0A":  # LISTEN
                continue
            if port is not None and int(port_hex, 16) != port:
                continue
            if owned is not None and row[9] not in owned:
                continue
            found.append((_proc_address(address_hex, width), int(port_hex, 16)))
    return found


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    fd_dir = f"/proc/{pid}/fd"
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return inodes
    for name in names:
        try:
            target = os.readlink(os.path.join(fd_dir, name))
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def _proc_address(hex_address: str, width: int) -> str:
    raw = bytes.fromhex(hex_address)
    # The kernel prints each 32-bit word in host byte order.
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, width, 4)) if socket.htonl(1) != 1 else raw
    address = ipaddress.ip_address(words)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def check_listening(pid: int, port: int, bind: str, what: str) -> None:
    """Raises :class:`ClusterError` if process ``pid`` listens at ``port`` on an address other than ``bind``."""
    if is_wildcard(bind) or not os.path.exists("/proc/net/tcp"):
        return
    wrong = {a for a, _ in listening_addresses(pid, port) if a != str(ipaddress.ip_address(bind))}
    if wrong:
        raise ClusterError(
            f"{what} listens on {', '.join(sorted(wrong))} port {port}, expected {bind} only: "
            f"the bind library did not take effect"
        )
