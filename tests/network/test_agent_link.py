"""Rules travel over the agent's own websocket: after its welcome an agent gets its
host's ruleset, every change after that, and its report is what the console shows."""

import json

import pytest
from asgiref.sync import sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator

from agent import protocol as wire
from monitoring import services as monitoring_services
from monitoring.routing import websocket_urlpatterns
from network import interfaces, rulesets, security_groups
from network.models import HostRules

pytestmark = pytest.mark.django_db(transaction=True)
BOOT = "0123456789abcdef0123456789abcdef"


def hello(host: str) -> dict:
    gpus = [{"uuid": f"GPU-{host}-{i}", "index": i, "name": "H100-80GB", "memory_total": 80 * 2**30,
             "mig_mode": False, "slices": []} for i in range(8)]
    return {"type": "hello", "v": 1, "host": host, "boot_id": BOOT, "agent": "test/1", "backend": "sim", "gpus": gpus}


@pytest.fixture
def web(fleet, acme, bob, running):
    return running(bob, acme, "web", host=fleet["hosts"]["h100-a"])


async def connect(ops, host):
    _, raw = await sync_to_async(monitoring_services.create_host_token)(actor=ops, host=host)
    ws = WebsocketCommunicator(URLRouter(websocket_urlpatterns), "/ws/agent/",
                               headers=[(b"authorization", f"Bearer {raw}".encode())])
    assert (await ws.connect())[0]
    await ws.send_to(text_data=json.dumps(hello(host.name)))
    assert json.loads(await ws.receive_from(timeout=5))["type"] == "welcome"
    return ws


async def test_a_connecting_agent_gets_the_rules_and_its_report_is_recorded(fleet, ops, web):
    host = fleet["hosts"]["h100-a"]
    ws = await connect(ops, host)
    try:
        frame = json.loads(await ws.receive_from(timeout=5))
        wanted = await HostRules.objects.aget(host=host)
        assert (frame["type"], frame["version"], frame["hash"]) == ("ruleset", wanted.version, wanted.hash)
        assert [i["ifname"] for i in frame["interfaces"]] == [f"gc{web.pk}"]
        report = wire.RulesetApplied(version=frame["version"], hash=frame["hash"], ok=True, offered=frame["version"])
        await ws.send_to(text_data=wire.encode(report))
        await ws.send_to(text_data=json.dumps({"type": "samples", "v": 1, "boot_id": BOOT, "records": []}))
        await ws.receive_from(timeout=5)  # the server read the report before this frame
    finally:
        await ws.disconnect()
    rules = await HostRules.objects.aget(host=host)
    assert rules.in_force and rules.applied_at is not None


async def test_a_change_in_the_console_reaches_the_connected_agent(fleet, ops, acme, bob, web):
    host = fleet["hosts"]["h100-a"]
    ws = await connect(ops, host)
    try:
        first = json.loads(await ws.receive_from(timeout=5))
        group = await sync_to_async(security_groups.create_group)(actor=bob, team=acme, name="https")
        await sync_to_async(security_groups.add_rule)(actor=bob, group=group, direction="inbound", protocol="tcp",
                                               port_from=443, cidr="10.0.0.0/8")
        interface = await sync_to_async(lambda: web.interface)()
        await sync_to_async(interfaces.set_groups)(actor=bob, interface=interface, groups=[group.pk])
        changed = json.loads(await ws.receive_from(timeout=5))
    finally:
        await ws.disconnect()
    assert changed["version"] == first["version"] + 1
    assert changed["interfaces"][0]["inbound"] == [{"proto": "tcp", "peers": ["10.0.0.0/8"], "ports": [443, 443]}]


async def test_an_agent_that_does_not_enforce_says_so(fleet, ops, web):
    from agent import firewall

    host = fleet["hosts"]["h100-a"]
    ws = await connect(ops, host)
    try:
        text = await ws.receive_from(timeout=5)

        class Socket:
            async def send(self, reply):
                await ws.send_to(text_data=reply)

        await firewall.answer(Socket(), text, None)
        await ws.send_to(text_data=json.dumps({"type": "samples", "v": 1, "boot_id": BOOT, "records": []}))
        await ws.receive_from(timeout=5)
    finally:
        await ws.disconnect()
    rules = await HostRules.objects.aget(host=host)
    assert not rules.in_force
    state = rulesets.applied_state(rules)
    assert state.state == "refused" and "--network" in state.text
