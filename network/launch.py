"""The subnet and security groups of an instance launch (instances.launch_options)."""

from __future__ import annotations

from .forms import network_fields, offer_network_choices
from .interfaces import on_network


class NetworkChoices:
    def add_fields(self, form, user) -> None:
        form.fields["subnet"], form.fields["security_groups"] = network_fields(
            subnet_help="Its private address is taken from this subnet.")
        offer_network_choices(form, user)

    def clean(self, form, data: dict) -> None:
        team, subnet = data.get("team"), data.get("subnet")
        if team is not None and subnet is not None and subnet.vpc.team_id != team.pk:
            form.add_error("subnet", f"Subnet {subnet.name} is not one of team {team.name}'s subnets.")
        for group in data.get("security_groups") or []:
            if team is not None and group.team_id != team.pk:
                form.add_error("security_groups", f"Security group {group.name} is not one of team {team.name}'s groups.")

    def around(self, *, actor, team, data: dict):
        groups = data.get("security_groups")
        if groups is not None and not isinstance(groups, list):  # the form's chosen groups
            groups = [group.pk for group in groups] or None
        return on_network(actor=actor, team=team, subnet=data.get("subnet"), groups=groups)
