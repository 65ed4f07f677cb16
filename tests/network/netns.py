"""Network namespaces as one host and its instances, for tests that need the kernel's
own packet filter: a "host" namespace routes between one veth pair per instance (the
host end named like the console names the instance's interface), each instance in its
own namespace with a /32 address. Sockets are opened inside a namespace (setns on a
short-lived thread), so the tests connect for real without leaving the namespaces
they made."""

from __future__ import annotations

import ctypes
import os
import shutil
import socket
import subprocess
import threading
import uuid
from dataclasses import dataclass, field

CLONE_NEWNET = 0x40000000
GATEWAY = "169.254.1.1"
_libc = ctypes.CDLL(None, use_errno=True)


def why_not() -> str | None:
    """Why these tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "network namespaces and nftables need root"
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return f"'{tool}' is not installed (apt-get install -y iproute2 nftables)"
    probe = f"gcp{uuid.uuid4().hex[:8]}"
    done = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if done.returncode != 0:
        return f"cannot create a network namespace: {done.stderr.strip()}"
    try:
        nft = subprocess.run(["ip", "netns", "exec", probe, "nft", "list", "ruleset"], capture_output=True, text=True)
        if nft.returncode != 0:
            return f"nftables does not work in a network namespace: {nft.stderr.strip()}"
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def sh(*args: str, ns: str | None = None) -> str:
    cmd = ["ip", "netns", "exec", ns, *args] if ns else list(args)
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {done.stderr.strip()}")
    return done.stdout


def open_socket(ns: str, kind: int) -> socket.socket:
    """A socket that lives in namespace ``ns``."""
    out: list = []

    def inside() -> None:
        try:
            with open(f"/run/netns/{ns}") as target:
                if _libc.setns(target.fileno(), CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "setns failed")
            out.append(socket.socket(socket.AF_INET, kind))
        except Exception as exc:  # handed to the caller
            out.append(exc)

    # setns changes only this thread, which ends right after; the socket keeps its namespace.
    worker = threading.Thread(target=inside)
    worker.start()
    worker.join()
    if isinstance(out[0], Exception):
        raise out[0]
    return out[0]


@dataclass
class Guest:
    ns: str
    ifname: str  # the host end of its veth pair
    address: str


@dataclass
class Host:
    """One host namespace and the instances plugged into it."""

    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:6])
    guests: list[Guest] = field(default_factory=list)

    @property
    def ns(self) -> str:
        return f"gch{self.tag}"

    def up(self) -> Host:
        sh("ip", "netns", "add", self.ns)
        sh("ip", "link", "set", "lo", "up", ns=self.ns)
        sh("ip", "addr", "add", f"{GATEWAY}/32", "dev", "lo", ns=self.ns)
        sh("sysctl", "-qw", "net.ipv4.ip_forward=1", ns=self.ns)
        return self

    def plug(self, ifname: str, address: str) -> Guest:
        guest = Guest(ns=f"gci{self.tag}{len(self.guests)}", ifname=ifname, address=address)
        sh("ip", "netns", "add", guest.ns)
        sh("ip", "link", "set", "lo", "up", ns=guest.ns)
        sh("ip", "link", "add", ifname, "type", "veth", "peer", "name", "eth0", "netns", guest.ns, ns=self.ns)
        sh("ip", "link", "set", ifname, "up", ns=self.ns)
        sh("ip", "link", "set", "eth0", "up", ns=guest.ns)
        sh("ip", "addr", "add", f"{address}/32", "dev", "eth0", ns=guest.ns)
        host_mac = _mac(self.ns, ifname)
        guest_mac = _mac(guest.ns, "eth0")
        sh("ip", "route", "add", GATEWAY, "dev", "eth0", ns=guest.ns)
        sh("ip", "route", "add", "default", "via", GATEWAY, "dev", "eth0", ns=guest.ns)
        sh("ip", "neigh", "replace", GATEWAY, "lladdr", host_mac, "dev", "eth0", ns=guest.ns)
        sh("ip", "route", "add", f"{address}/32", "dev", ifname, ns=self.ns)
        sh("ip", "neigh", "replace", address, "lladdr", guest_mac, "dev", ifname, ns=self.ns)
        self.guests.append(guest)
        return guest

    def down(self) -> None:
        for name in [g.ns for g in self.guests] + [self.ns]:
            subprocess.run(["ip", "netns", "del", name], capture_output=True)

    def nft(self) -> tuple[str, ...]:
        """The command that runs nft in the host namespace."""
        return ("ip", "netns", "exec", self.ns, "nft")


def _mac(ns: str, ifname: str) -> str:
    return sh("cat", f"/sys/class/net/{ifname}/address", ns=ns).strip()


class Listener:
    """A TCP and a UDP server on one port inside a namespace, answering 'pong'."""

    def __init__(self, guest: Guest, port: int):
        self.tcp = open_socket(guest.ns, socket.SOCK_STREAM)
        self.tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.tcp.bind((guest.address, port))
        self.tcp.listen(16)
        self.udp = open_socket(guest.ns, socket.SOCK_DGRAM)
        self.udp.bind((guest.address, port))
        self.closed = threading.Event()
        self.threads = [threading.Thread(target=self._tcp, daemon=True), threading.Thread(target=self._udp, daemon=True)]
        for thread in self.threads:
            thread.start()

    def _tcp(self) -> None:
        while not self.closed.is_set():
            try:
                conn, _ = self.tcp.accept()
            except OSError:
                return
            with conn:
                conn.sendall(b"pong")

    def _udp(self) -> None:
        while not self.closed.is_set():
            try:
                _, peer = self.udp.recvfrom(64)
                if peer is None:  # shut down
                    return
                self.udp.sendto(b"pong", peer)
            except OSError:
                return

    def close(self) -> None:
        self.closed.set()
        for s in (self.tcp, self.udp):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


def tcp_reaches(client: Guest, server: Guest, port: int, timeout: float = 0.5) -> bool:
    with open_socket(client.ns, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        try:
            s.connect((server.address, port))
            return s.recv(4) == b"pong"
        except OSError:
            return False


def udp_reaches(client: Guest, server: Guest, port: int, timeout: float = 0.5) -> bool:
    with open_socket(client.ns, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        try:
            s.sendto(b"ping", (server.address, port))
            return s.recvfrom(64)[0] == b"pong"
        except OSError:
            return False
