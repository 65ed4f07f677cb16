"""Webhook and Slack targets go to public addresses only, decided on the address that
is connected to: every special range Python's ipaddress module knows (private, loopback,
link-local, reserved, multicast, unspecified, shared, site-local), also when an IPv6
address carries such an IPv4 address (mapped, 6to4, Teredo, NAT64, IPv4-compatible);
and the sender connects to the address it checked, whatever DNS answers next."""

import ipaddress
import socket

import pytest
from alert_support import Receiver
from django.core.exceptions import ValidationError

from alerting import notify, services

V4, V6 = ipaddress._IPv4Constants, ipaddress._IPv6Constants

SPECIAL_V4 = [*V4._private_networks, V4._reserved_network, V4._multicast_network, V4._linklocal_network,
              V4._loopback_network, V4._public_network, ipaddress.ip_network(V4._unspecified_address)]
SPECIAL_V6 = [*V6._private_networks, *V6._reserved_networks, V6._multicast_network, V6._linklocal_network,
              V6._sitelocal_network]


def samples(network):
    """The first, second and last address of a range, less those ipaddress itself
    calls global (a few well-known anycast addresses sit inside special ranges)."""
    found = {network.network_address, network.network_address + min(1, network.num_addresses - 1),
             network.broadcast_address}
    return sorted((a for a in found if not a.is_global), key=str)


def embeddings(v4: ipaddress.IPv4Address) -> dict[str, ipaddress.IPv6Address]:
    n = int(v4)
    teredo_client = n ^ 0xFFFFFFFF  # Teredo stores the client's address inverted
    return {
        "mapped": ipaddress.IPv6Address(f"::ffff:{v4}"),
        "nat64": ipaddress.IPv6Address(int(ipaddress.IPv6Address("64:ff9b::")) | n),
        "local nat64": ipaddress.IPv6Address(int(ipaddress.IPv6Address("64:ff9b:1::")) | n),
        "compatible": ipaddress.IPv6Address(n),
        "6to4": ipaddress.IPv6Address((0x2002 << 112) | (n << 80) | 1),
        "teredo server": ipaddress.IPv6Address((0x20010000 << 96) | (n << 64) | (8 << 32) | 0x08080808 ^ 0xFFFFFFFF),
        "teredo client": ipaddress.IPv6Address((0x20010000 << 96) | (0x08080808 << 64) | teredo_client),
    }


REFUSED = [a for net in SPECIAL_V4 + SPECIAL_V6 for a in samples(net)]
REFUSED_EMBEDDED = [(form, v6) for net in SPECIAL_V4 for a in samples(net) for form, v6 in embeddings(a).items()]
PUBLIC = ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "2a00:1450:4001:82a::200e",
          "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1"]


@pytest.mark.parametrize("ip", REFUSED, ids=str)
def test_every_special_range_is_refused(ip):
    assert notify.forbidden(ip) is not None


@pytest.mark.parametrize(("form", "ip"), REFUSED_EMBEDDED, ids=lambda v: str(v))
def test_a_special_ipv4_inside_ipv6_is_refused(form, ip):
    assert notify.forbidden(ip) is not None, form


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_are_allowed(address):
    assert notify.forbidden(ipaddress.ip_address(address)) is None


@pytest.mark.parametrize("address", ["64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe", "2002:7f00:1::", "::127.0.0.1",
                                     "::ffff:169.254.169.254", "64:ff9b:1::a00:1", "2002:a9fe:a9fe::1"])
def test_a_name_resolving_to_an_embedded_private_address_is_refused(alice, acme, monkeypatch, address):
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: [(socket.AF_INET6, 1, 6, "", (address, 80, 0, 0))])
    with pytest.raises(ValidationError) as refused:
        services.create_channel(actor=alice, team=acme, name="hook", kind="webhook", target="http://hooks.example/x")
    assert "public addresses only" in str(refused.value)


@pytest.mark.parametrize("url", ["http://[64:ff9b::7f00:1]/x", "http://[::ffff:127.0.0.1]/x", "http://[2002:a9fe:a9fe::]/x",
                                 "http://[::a9fe:a9fe]/x", "http://[fe80::1%25eth0]/x", "http://0.0.0.0/x"])
def test_a_literal_embedded_address_is_refused(alice, acme, url):
    with pytest.raises(ValidationError):
        services.create_channel(actor=alice, team=acme, name="hook", kind="webhook", target=url)


@pytest.mark.parametrize("url", ["http://[zz]/", "https://[::1", "http://[1.2.3.4]/x"])
def test_a_bracketed_host_that_is_no_address_is_named(alice, acme, url):
    with pytest.raises(ValidationError, match="not a valid URL"):
        services.create_channel(actor=alice, team=acme, name="hook", kind="webhook", target=url)


class Resolver:
    """A public address first, loopback after: the rebinding a second lookup would see."""

    def __init__(self):
        self.answers = ["93.184.215.14", "127.0.0.1"]
        self.calls = 0

    def __call__(self, host, port, *args, **kwargs):
        try:  # an address is its own answer, as the system resolver gives it
            answer = str(ipaddress.ip_address(host))
        except ValueError:
            answer = self.answers[min(self.calls, 1)]
            self.calls += 1
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (answer, port))]


def test_the_sender_connects_only_to_the_address_it_checked(monkeypatch):
    resolver, connected = Resolver(), []

    def connect(address, *args, **kwargs):
        connected.append(address)
        raise ConnectionRefusedError("not in tests")

    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    monkeypatch.setattr(socket, "create_connection", connect)
    with pytest.raises(ConnectionRefusedError):
        notify.post("https://hooks.example/x", b"{}", {})
    assert connected == [("93.184.215.14", 443)]
    assert resolver.calls == 1


def test_a_redirect_is_not_followed(settings):
    settings.ALERT_WEBHOOK_ALLOW_HOSTS = "127.0.0.1"
    receiver = Receiver(statuses=[302])
    try:
        result = notify.post(receiver.url, b"{}", {})
    finally:
        receiver.close()
    assert not result.ok and result.status == 302
    assert "redirects are not followed" in result.error
    assert len(receiver.posts) == 1


def test_the_name_travels_in_the_host_header_to_the_checked_address(settings, monkeypatch):
    settings.ALERT_WEBHOOK_ALLOW_HOSTS = "hooks.example"
    receiver = Receiver()
    port = receiver.server.server_address[1]
    resolver = Resolver()
    resolver.answers = ["127.0.0.1", "10.9.9.9"]
    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    try:
        result = notify.post(f"http://hooks.example:{port}/hook", b"{}", {})
    finally:
        receiver.close()
    assert result.ok and resolver.calls == 1
    assert receiver.posts[0][0]["host"] == f"hooks.example:{port}"
