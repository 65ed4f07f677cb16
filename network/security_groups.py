"""Security groups and their rules. A change re-renders the rulesets of the hosts whose
instances it reaches, once it commits."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import transaction

from audit.recording import record_event

from .checks import EVERYWHERE, MAX_RULES_PER_GROUP, check_rule
from .models import (
    Direction,
    Protocol,
    SecurityGroup,
    SecurityRule,
)
from .rulesets import resync_on_commit


def rule_details(rule: SecurityRule) -> dict:
    return {"id": rule.pk, "direction": rule.direction, "protocol": rule.protocol, "ports": rule.ports,
            "cidr": rule.cidr, "peer_group": rule.peer_group_id}


def _check_group_name(team, name: str, exclude: SecurityGroup | None = None) -> None:
    if SecurityGroup.objects.filter(team=team, name=name).exclude(pk=getattr(exclude, "pk", None)).exists():
        raise ValidationError({"name": f"Team {team.name} already has a security group named {name}."})


@transaction.atomic
def create_group(*, actor, team, name: str, description: str = "", rules: list[dict] | None = None) -> SecurityGroup:
    _check_group_name(team, name)
    group = SecurityGroup.objects.create(team=team, name=name, description=description)
    if rules is None:  # as AWS does: a new group lets nothing in and everything out
        rules = [{"direction": Direction.OUTBOUND, "protocol": Protocol.ANY, "cidr": EVERYWHERE,
                  "description": "all outbound"}]
    _write_rules(group, rules, field="rules")
    record_event(actor=actor, action="network.group.create", target=group, team=team,
                 details={"name": name, "rules": [rule_details(r) for r in group.rules.all()]})
    resync_on_commit(team.pk)
    return group


def _write_rules(group: SecurityGroup, rules: list[dict], *, field: str) -> list[SecurityRule]:
    if not isinstance(rules, list) or len(rules) > MAX_RULES_PER_GROUP:
        raise ValidationError({field: f"Rules are a list of at most {MAX_RULES_PER_GROUP}."})
    specs, errors = [], {}
    for n, values in enumerate(rules):
        try:
            specs.append(check_rule(values if isinstance(values, dict) else {}, group=group))
        except ValidationError as exc:
            errors.update({f"{field}[{n}].{k}": v for k, v in exc.message_dict.items()})
    if errors:
        raise ValidationError(errors)
    return SecurityRule.objects.bulk_create([SecurityRule(group=group, **vars(spec)) for spec in specs])


@transaction.atomic
def update_group(*, actor, group: SecurityGroup, name: str | None = None, description: str | None = None,
                 rules: list[dict] | None = None) -> SecurityGroup:
    """Rename, describe, or replace every rule of the group at once."""
    group = SecurityGroup.objects.select_for_update().select_related("team").get(pk=group.pk)
    before = [rule_details(r) for r in group.rules.all()]
    changed = {}
    if name is not None and name != group.name:
        if group.is_default:
            raise ValidationError({"name": "The default group keeps its name."})
        _check_group_name(group.team, name, exclude=group)
        changed["name"] = [group.name, name]
        group.name = name
    if description is not None and description != group.description:
        changed["description"] = [group.description, description]
        group.description = description
    group.save(update_fields=["name", "description"])
    if rules is not None:
        group.rules.all().delete()
        _write_rules(group, rules, field="rules")
        changed["rules"] = {"before": before, "after": [rule_details(r) for r in group.rules.all()]}
    record_event(actor=actor, action="network.group.update", target=group, team=group.team_id, details=changed)
    resync_on_commit(group.team_id)
    return group


@transaction.atomic
def add_rule(*, actor, group: SecurityGroup, **values) -> SecurityRule:
    group = SecurityGroup.objects.select_for_update().select_related("team").get(pk=group.pk)
    if group.rules.count() >= MAX_RULES_PER_GROUP:
        raise ValidationError({"rules": f"A group holds at most {MAX_RULES_PER_GROUP} rules."})
    spec = check_rule(values, group=group)
    rule = SecurityRule.objects.create(group=group, **vars(spec))
    record_event(actor=actor, action="network.rule.add", target=group, team=group.team_id,
                 details={"group": group.name, "rule": rule_details(rule)})
    resync_on_commit(group.team_id)
    return rule


@transaction.atomic
def remove_rule(*, actor, rule: SecurityRule) -> None:
    group = SecurityGroup.objects.select_for_update().get(pk=rule.group_id)
    record_event(actor=actor, action="network.rule.remove", target=group, team=group.team_id,
                 details={"group": group.name, "rule": rule_details(rule)})
    rule.delete()
    resync_on_commit(group.team_id)


@transaction.atomic
def delete_group(*, actor, group: SecurityGroup) -> None:
    if group.is_default:
        raise ValidationError({"group": "The default group cannot be deleted."})
    if group.interfaces.filter(released_at__isnull=True).exists():
        raise ValidationError({"group": f"Instances are in group {group.name}; take them out first."})
    users = SecurityRule.objects.filter(peer_group=group).exclude(group=group).select_related("group")
    if users:
        names = ", ".join(sorted({r.group.name for r in users}))
        raise ValidationError({"group": f"Rules of {names} name group {group.name}; remove them first."})
    record_event(actor=actor, action="network.group.delete", target=group, team=group.team_id,
                 details={"name": group.name, "rules": [rule_details(r) for r in group.rules.all()]})
    group.rules.all().delete()
    group.interfaces.clear()
    group.delete()
