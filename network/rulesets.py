"""What each host enforces: its desired ruleset (versioned, rendered from its instances'
interfaces and groups), sent to its agent, the version the agent reports applied,
and the drift the console shows."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from agent import protocol as wire
from audit.recording import record_event
from instances.models import HOLDING_STATES, Host

from .models import (
    Direction,
    HostRules,
    Interface,
    SecurityGroup,
    SecurityRule,
    ifname,
)

log = logging.getLogger(__name__)


APPLY_WITHIN = timedelta(seconds=30)  # a host that has not applied a change by then is alerted


def resync_on_commit(team_id: int, hosts=()) -> None:
    transaction.on_commit(lambda: resync(team_id=team_id, hosts=hosts))


def resync(*, team_id: int | None = None, hosts=()) -> list[HostRules]:
    """Bring the desired rules of the team's hosts (and ``hosts``) up to date."""
    ids = {h for h in hosts if h}
    if team_id is not None:
        live = _live().filter(team_id=team_id)
        for host_id, placed_on in live.values_list("instance__host_id", "placed_on_id"):
            ids |= {host_id, placed_on}
    return [sync_host(host_id=h) for h in sorted(i for i in ids if i)]


def _live():
    return Interface.objects.filter(released_at__isnull=True)


def _on_host(host_id: int):
    return _live().filter(instance__host_id=host_id, instance__state__in=HOLDING_STATES)


def desired(host_id: int) -> tuple[list[wire.NetInterface], dict[str, list[str]]]:
    """The interfaces of the instances on the host with their groups' rules, and the
    members' addresses (wherever they run) of each group a rule names as its peers.
    Read as plain rows, four queries whatever the size; interfaces with the same groups
    share their rule lists."""
    interfaces = list(_on_host(host_id).values_list("pk", "instance_id", "address"))
    through = SecurityGroup.interfaces.through.objects
    groups_of: dict[int, list[int]] = {}
    for interface_id, group_id in through.filter(interface_id__in=[i[0] for i in interfaces]).values_list(
            "interface_id", "securitygroup_id"):
        groups_of.setdefault(interface_id, []).append(group_id)
    rules = list(SecurityRule.objects.filter(group_id__in={g for gs in groups_of.values() for g in gs}).values_list(
        "group_id", "direction", "protocol", "port_from", "port_to", "cidr", "peer_group_id"))
    peers = _group_addresses({r[6] for r in rules if r[6]})
    by_group: dict[int, list[tuple]] = {}
    for rule in rules:
        by_group.setdefault(rule[0], []).append(rule)
    shared: dict[tuple[int, ...], tuple[list, list]] = {}
    out = []
    for pk, instance_id, address in interfaces:
        key = tuple(sorted(groups_of.get(pk, [])))
        if key not in shared:
            mine = [r for g in key for r in by_group.get(g, [])]
            shared[key] = (_net_rules([r for r in mine if r[1] == Direction.INBOUND], peers),
                           _net_rules([r for r in mine if r[1] == Direction.OUTBOUND], peers))
        inbound, outbound = shared[key]
        out.append(wire.NetInterface(ifname=ifname(instance_id), address=f"{address}/32", inbound=inbound,
                                     outbound=outbound))
    named = {r.group for i in out for r in (*i.inbound, *i.outbound) if r.group}
    return sorted(out, key=lambda i: i.ifname), {g: sorted(peers[int(g[1:])]) for g in sorted(named)}


def _group_addresses(group_ids: set) -> dict[int, list[str]]:
    found: dict[int, list[str]] = {g: [] for g in group_ids if g}
    rows = _live().filter(groups__in=list(found), instance__state__in=HOLDING_STATES).values_list("groups", "address")
    for group_id, address in rows:
        found[group_id].append(f"{address}/32")
    return found


def _net_rules(rules: list[tuple], peers: dict[int, list[str]]) -> list[wire.NetRule]:
    """Rows of (group, direction, protocol, port_from, port_to, cidr, peer group) as wire
    rules: deduplicated, in one order."""
    out = set()
    for _, _, protocol, port_from, port_to, cidr, peer_group in rules:
        if not cidr and not peers.get(peer_group):  # a group with no members yet allows nothing
            continue
        ports = None if port_from is None else (port_from, port_to)
        out.add((protocol, cidr, f"g{peer_group}" if not cidr else "", ports))
    return [wire.NetRule(proto=p, peers=[cidr] if cidr else [], group=group, ports=ports)
            for p, cidr, group, ports in sorted(out, key=lambda x: (x[0], x[1], x[2], x[3] or (-1, -1)))]


def sync_host(*, host_id: int, now: datetime | None = None) -> HostRules:
    """Compute the host's rules; when they changed, the next version, sent to its agent."""
    interfaces, groups = desired(host_id)
    digest = wire.ruleset_digest(interfaces, groups)
    with transaction.atomic():
        try:
            rules, _ = HostRules.objects.select_for_update().get_or_create(host_id=host_id)
        except IntegrityError:  # made by a concurrent sync in between
            rules = HostRules.objects.select_for_update().get(host_id=host_id)
        if rules.hash == digest and rules.version:
            return rules
        rules.version += 1
        rules.hash = digest
        rules.frame = wire.encode(wire.Ruleset(version=rules.version, hash=digest, interfaces=interfaces,
                                               groups=groups))
        rules.changed_at = now or timezone.now()
        # The agent's word on an older version no longer applies; a frame too large to
        # send is never sent (the host shows as refused, and operators are alerted).
        too_large = len(rules.frame) > wire.MAX_FRAME_BYTES
        rules.error = (f"the ruleset is {len(rules.frame)} bytes, over the {wire.MAX_FRAME_BYTES} one frame may "
                       "carry; it was not sent") if too_large else ""
        rules.save(update_fields=["version", "hash", "frame", "changed_at", "error"])
        _on_host(host_id).update(placed_on_id=host_id)
        record_event(actor="system", action="network.rules.version", target=rules.host, team=None,
                     details={"version": rules.version, "hash": digest, "interfaces": len(interfaces)})
        frame = rules.frame
        if not too_large:
            transaction.on_commit(lambda: push(host_id, frame))
    return rules


def host_group(host_id: int) -> str:
    """The channel group of a host's agent connection (monitoring.consumers joins it)."""
    return f"agent-network-{host_id}"


def push(host_id: int, frame: str) -> None:
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(host_group(host_id), {"type": "network.ruleset", "frame": frame})
    except Exception:  # the agent gets it on its next connection
        log.warning("could not send network rules to host %s", host_id, exc_info=True)


def current_frame(host_id: int) -> str | None:
    """The ruleset frame a connecting agent gets first (None: nothing to enforce yet, or
    too large to send)."""
    rules = HostRules.objects.filter(host_id=host_id).only("frame").first()
    if rules is None or not rules.frame or len(rules.frame) > wire.MAX_FRAME_BYTES:
        return None
    return rules.frame


@transaction.atomic
def record_report(*, host: Host, report: wire.RulesetApplied, now: datetime | None = None) -> HostRules:
    """What the host's agent says is in force, and why an offered version was refused."""
    now = now or timezone.now()
    rules = HostRules.objects.select_for_update().filter(host=host).first()
    if rules is None:
        rules = HostRules.objects.create(host=host)
    moved = (rules.applied_version, rules.applied_hash) != (report.version, report.hash)
    # A host that keeps refusing (e.g. an agent without --network, asked again every 10 s)
    # is audited once per version and reason, not on every answer.
    new_refusal = not report.ok and report.error != rules.error
    rules.applied_version, rules.applied_hash = report.version, report.hash
    rules.reported_at = now
    rules.error = "" if report.ok else report.error
    if moved:
        rules.applied_at = now
    rules.save(update_fields=["applied_version", "applied_hash", "reported_at", "error", "applied_at"])
    if moved or new_refusal:
        record_event(actor="system", action="network.rules.applied" if report.ok else "network.rules.refused",
                     target=host, outcome="success" if report.ok else "failure",
                     details={"version": report.version, "hash": report.hash, "offered": report.offered,
                              "error": report.error})
    return rules


@dataclass(frozen=True)
class Applied:
    state: str  # "applied", "pending", "drift", "refused", "none"
    text: str


def applied_state(rules: HostRules | None, *, now: datetime | None = None) -> Applied:
    """How a host's rules stand, in words."""
    now = now or timezone.now()
    if rules is None or rules.version == 0:
        return Applied("none", "no rules sent yet")
    if rules.in_force:
        return Applied("applied", f"rules applied at version {rules.version}")
    if rules.error:
        return Applied("refused", f"version {rules.version} not applied ({rules.error}); "
                                  f"version {rules.applied_version} in force")
    late = now - rules.changed_at > APPLY_WITHIN
    word = "drift" if late else "pending"
    what = (f"version {rules.applied_version} in force" if rules.applied_version else "nothing applied")
    return Applied(word, f"{'drift' if late else 'applying'}: version {rules.version} wanted, {what}")


def overdue(now: datetime | None = None) -> list[HostRules]:
    """Hosts that have not applied their latest version within APPLY_WITHIN."""
    now = now or timezone.now()
    return list(not_in_force().filter(changed_at__lt=now - APPLY_WITHIN).select_related("host"))


def not_in_force():
    """Hosts whose latest version is not the one they applied (``HostRules.in_force``, in SQL)."""
    return HostRules.objects.filter(version__gt=0).filter(~Q(applied_version=F("version")) | ~Q(applied_hash=F("hash")))
