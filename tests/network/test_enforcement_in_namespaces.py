"""The console's rules enforced by the kernel: instances of two teams on one host, each
in a network namespace of its own behind a veth pair into a host namespace, the agent's
renderer and applier putting the console's rules into the host namespace's nftables,
and real TCP and UDP connections between them. Runs as root with nft and ip (CI);
skipped elsewhere, saying why."""

import msgspec
import netns
import pytest

from agent import firewall
from agent import protocol as wire
from network import rulesets, security_groups, vpcs
from network.models import HostRules

WHY_NOT = netns.why_not()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=f"needs the kernel's packet filter: {WHY_NOT}")
PORT = 8443


@pytest.fixture
def host(fleet):
    made = netns.Host().up()
    yield made
    made.down()


@pytest.fixture
def world(fleet, acme, globex, bob, charlie, running, host, tmp_path, monkeypatch):
    """web and db (Acme) and lab (Globex) on h100-a, each listening on PORT (TCP and UDP);
    the host's agent applies every ruleset the console sends it."""
    console_host = fleet["hosts"]["h100-a"]
    enforcer = firewall.Enforcer(state_path=tmp_path / "rules.json", nft=host.nft())

    def deliver(host_id, frame):  # the agent's websocket, without the socket
        assert host_id == console_host.pk
        rulesets.record_report(host=console_host, report=enforcer.apply_text(frame))

    monkeypatch.setattr(rulesets, "push", deliver)
    acme_vpc = vpcs.create_vpc(actor=bob, team=acme, name="lab", cidr="10.231.0.0/20")
    globex_vpc = vpcs.create_vpc(actor=charlie, team=globex, name="lab", cidr="10.231.16.0/20")
    acme_subnet = vpcs.create_subnet(actor=bob, vpc=acme_vpc, name="a", cidr="10.231.1.0/24")
    globex_subnet = vpcs.create_subnet(actor=charlie, vpc=globex_vpc, name="g", cidr="10.231.17.0/24")
    instances = {
        "web": running(bob, acme, "web", host=console_host, subnet=acme_subnet.pk),
        "db": running(bob, acme, "db", host=console_host, subnet=acme_subnet.pk),
        "lab": running(charlie, globex, "lab", host=console_host, subnet=globex_subnet.pk),
    }
    guests = {name: host.plug(i.interface.ifname, i.interface.address) for name, i in instances.items()}
    listeners = [netns.Listener(g, PORT) for g in guests.values()]
    rulesets.resync(hosts=[console_host.pk])
    yield {"host": console_host, "instances": instances, "enforcer": enforcer, **guests}
    for listener in listeners:
        listener.close()


def reaches(world, a, b) -> bool:
    return netns.tcp_reaches(world[a], world[b], PORT)


def test_members_of_the_default_group_reach_each_other(world):
    assert reaches(world, "web", "db") and reaches(world, "db", "web")
    assert netns.udp_reaches(world["web"], world["db"], PORT)


def test_another_teams_instance_is_refused_both_ways(world):
    assert not reaches(world, "lab", "web")
    assert not netns.udp_reaches(world["lab"], world["web"], PORT)
    assert not reaches(world, "web", "lab")


def test_the_console_shows_the_rules_applied(world):
    rules = HostRules.objects.get(host=world["host"])
    assert rules.in_force
    assert rulesets.applied_state(rules).text == f"rules applied at version {rules.version}"


def test_a_rule_added_in_the_console_opens_the_port_and_removing_it_closes_it(world, bob):
    web = world["instances"]["web"]
    group = web.interface.groups.get()
    lab_address = world["instances"]["lab"].interface.address
    rule = security_groups.add_rule(actor=bob, group=group, direction="inbound", protocol="tcp", port_from=PORT,
                             cidr=f"{lab_address}/32")
    assert reaches(world, "lab", "web")
    assert not netns.udp_reaches(world["lab"], world["web"], PORT)  # tcp only
    security_groups.remove_rule(actor=bob, rule=rule)
    assert not reaches(world, "lab", "web")
    assert HostRules.objects.get(host=world["host"]).in_force


def test_a_port_outside_the_rule_stays_closed(world, bob):
    group = world["instances"]["web"].interface.groups.get()
    security_groups.add_rule(actor=bob, group=group, direction="inbound", protocol="tcp", port_from=PORT + 1,
                      port_to=PORT + 10, cidr="10.231.16.0/20")
    assert not reaches(world, "lab", "web")


def test_a_ruleset_the_kernel_rejects_leaves_the_previous_one_in_force(world):
    rules = HostRules.objects.get(host=world["host"])
    good = msgspec.json.decode(rules.frame, type=wire.Ruleset)
    # Two interfaces of one name: nft parses it, the kernel refuses the duplicate map key.
    twice = [*good.interfaces, wire.NetInterface(ifname=good.interfaces[0].ifname, address="10.231.1.250/32",
                                                 inbound=[], outbound=[])]
    bad = wire.Ruleset(version=good.version + 1, hash=wire.ruleset_digest(twice, good.groups), interfaces=twice,
                       groups=good.groups)
    HostRules.objects.filter(pk=rules.pk).update(version=bad.version, hash=bad.hash, frame=wire.encode(bad))
    rulesets.push(world["host"].pk, wire.encode(bad))
    assert reaches(world, "web", "db") and not reaches(world, "lab", "web")
    after = HostRules.objects.get(host=world["host"])
    assert (after.applied_version, after.applied_hash) == (good.version, good.hash)
    assert "File exists" in after.error
    state = rulesets.applied_state(after)
    assert state.state == "refused"
    assert f"version {good.version} in force" in state.text


def test_a_restarted_agent_puts_the_rules_back_before_it_connects(world, host):
    netns.sh("nft", "flush", "ruleset", ns=host.ns)  # what a reboot leaves
    assert reaches(world, "lab", "web")
    restarted = firewall.Enforcer(state_path=world["enforcer"].state_path, nft=host.nft())
    assert restarted.restore().ok
    assert not reaches(world, "lab", "web") and reaches(world, "web", "db")
    assert restarted.version == HostRules.objects.get(host=world["host"]).version


def test_an_instance_cannot_send_from_another_address(world):
    with netns.open_socket(world["lab"].ns, netns.socket.SOCK_STREAM) as s:
        netns.sh("ip", "addr", "add", f"{world['db'].address}/32", "dev", "eth0", ns=world["lab"].ns)
        s.bind((world["db"].address, 0))
        s.settimeout(0.5)
        with pytest.raises(OSError):
            s.connect((world["web"].address, PORT))


def test_an_instance_link_the_console_did_not_list_carries_nothing(world, host):
    stray = host.plug("gc999999", "10.231.1.99")
    listener = netns.Listener(stray, PORT)
    try:
        assert not netns.tcp_reaches(world["web"], stray, PORT)  # web may send anywhere; the stray link may not
        assert not netns.tcp_reaches(stray, world["web"], PORT)
    finally:
        listener.close()
