"""What each host is told to enforce: its instances' interfaces with their groups' rules,
versioned, changed only when the rules change."""

from agent import protocol as wire
from instances import lifecycle as instance_lifecycle
from network import interfaces, rulesets, security_groups
from network.models import HostRules, Interface


def ruleset(host):
    interfaces, _ = rulesets.desired(host.pk)
    return {i.ifname: i for i in interfaces}


def peers(host, rule):
    """A rule's peers, a group's members where it names one."""
    return rulesets.desired(host.pk)[1][rule.group] if rule.group else rule.peers


def test_default_group_members_reach_each_other_and_no_one_else(fleet, acme, globex, bob, charlie, running):
    host = fleet["hosts"]["h100-a"]
    web = running(bob, acme, "web", host=host)
    db = running(bob, acme, "db", host=host)
    lab = running(charlie, globex, "lab", host=host)
    rules = ruleset(host)
    acme_addresses = sorted(f"{i.interface.address}/32" for i in (web, db))
    assert [peers(host, r) for r in rules[f"gc{web.pk}"].inbound] == [acme_addresses]
    assert f"{lab.interface.address}/32" not in peers(host, rules[f"gc{web.pk}"].inbound[0])
    assert [peers(host, r) for r in rules[f"gc{lab.pk}"].inbound] == [[f"{lab.interface.address}/32"]]
    assert rules[f"gc{web.pk}"].outbound[0].peers == ["0.0.0.0/0"]


def test_a_version_is_made_only_when_the_rules_change(fleet, acme, bob, running):
    host = fleet["hosts"]["h100-a"]
    running(bob, acme, "web", host=host)
    first = HostRules.objects.get(host=host).version
    assert rulesets.sync_host(host_id=host.pk).version == first
    group = security_groups.create_group(actor=bob, team=acme, name="ssh")
    security_groups.add_rule(actor=bob, group=group, direction="outbound", protocol="tcp", port_from=22, cidr="10.9.0.0/16")
    assert HostRules.objects.get(host=host).version == first  # no instance is in the group yet


def test_changing_a_running_instances_groups_makes_a_new_version(fleet, acme, bob, running):
    host = fleet["hosts"]["h100-a"]
    web = running(bob, acme, "web", host=host)
    before = HostRules.objects.get(host=host).version
    group = security_groups.create_group(actor=bob, team=acme, name="https", rules=[
        {"direction": "inbound", "protocol": "tcp", "port_from": 443, "cidr": "10.0.0.0/8"}])
    interfaces.set_groups(actor=bob, interface=web.interface, groups=[group.pk])
    after = HostRules.objects.get(host=host)
    assert after.version == before + 1
    assert [(r.proto, r.ports) for r in ruleset(host)[f"gc{web.pk}"].inbound] == [("tcp", (443, 443))]


def test_a_terminated_instance_leaves_the_rules_and_frees_its_address(fleet, acme, bob, running):
    host = fleet["hosts"]["h100-a"]
    web = running(bob, acme, "web", host=host)
    address = web.interface.address
    instance_lifecycle.terminate_instance(actor=bob, instance=web)
    assert ruleset(host) == {}
    assert Interface.objects.get(instance=web).released_at is not None
    again = running(bob, acme, "web2", host=host)
    assert again.interface.address == address


def test_the_frame_sent_carries_the_version_and_hash(fleet, acme, bob, running):
    import msgspec

    from agent import protocol as wire

    host = fleet["hosts"]["h100-a"]
    running(bob, acme, "web", host=host)
    rules = HostRules.objects.get(host=host)
    frame = msgspec.json.decode(rules.frame, type=wire.Ruleset)
    assert (frame.version, frame.hash) == (rules.version, rules.hash)
    assert wire.ruleset_digest(frame.interfaces, frame.groups) == rules.hash


def test_a_ruleset_too_large_for_one_frame_is_not_sent_and_says_so(fleet, acme, bob, running, monkeypatch):
    sent = []
    monkeypatch.setattr(rulesets, "push", lambda host_id, frame: sent.append(frame))
    monkeypatch.setattr(wire, "MAX_FRAME_BYTES", 200)
    host = fleet["hosts"]["h100-a"]
    running(bob, acme, "web", host=host)
    rules = HostRules.objects.get(host=host)
    assert sent == [] and rulesets.current_frame(host.pk) is None
    assert "over the 200 one frame may carry" in rulesets.applied_state(rules).text
