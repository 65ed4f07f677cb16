from django import forms

from console.forms import ModelIdsField
from console.models import Team
from console.tenancy import WRITE_ROLES
from console.validators import plain_name

from .models import Direction, Protocol, SecurityGroup, Subnet


class TeamChoice(forms.Form):
    team = forms.ModelChoiceField(queryset=Team.objects.none(), empty_label=None)

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["team"].queryset = Team.objects.for_user(user, WRITE_ROLES)


class VpcForm(TeamChoice):
    name = forms.CharField(max_length=48, validators=[plain_name])
    cidr = forms.CharField(max_length=18, label="IPv4 range (CIDR)", help_text="private, a /16 to a /28, e.g. 10.20.0.0/16")


class SubnetForm(forms.Form):
    name = forms.CharField(max_length=48, validators=[plain_name])
    cidr = forms.CharField(max_length=18, label="IPv4 range (CIDR)", help_text="inside the VPC, e.g. 10.20.1.0/24")


class GroupForm(TeamChoice):
    name = forms.CharField(max_length=48, validators=[plain_name])
    description = forms.CharField(max_length=200, required=False)


class RuleForm(forms.Form):
    """Only shapes here; services.check_rule holds every rule and names what is wrong."""

    direction = forms.ChoiceField(choices=Direction.choices)
    protocol = forms.ChoiceField(choices=Protocol.choices)
    port_from = forms.CharField(max_length=6, required=False, label="From port", help_text="tcp/udp; empty: all ports")
    port_to = forms.CharField(max_length=6, required=False, label="To port", help_text="empty: the same as from")
    cidr = forms.CharField(max_length=18, required=False, label="CIDR", help_text="source (inbound) or destination")
    peer_group = forms.ModelChoiceField(queryset=SecurityGroup.objects.none(), required=False, label="or group",
                                        empty_label="—")
    confirm_open = forms.BooleanField(required=False, label="Yes, open this to the whole internet (0.0.0.0/0)")
    description = forms.CharField(max_length=200, required=False)

    def __init__(self, *args, group: SecurityGroup, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["peer_group"].queryset = SecurityGroup.objects.filter(team_id=group.team_id)

    def values(self) -> dict:
        data = dict(self.cleaned_data)
        data["peer_group"] = data["peer_group"].pk if data.get("peer_group") else None
        return data


def network_fields(
    subnet_help: str = "Each instance's private address is taken from this subnet.",
) -> tuple[forms.ModelChoiceField, ModelIdsField]:
    """The subnet and security groups of a form that launches instances (now, or later for
    a job or a scaling group); ``offer_network_choices`` fills them for the user."""
    subnet = forms.ModelChoiceField(
        queryset=Subnet.objects.none(), required=False, empty_label="Team's default subnet", label="Subnet",
        help_text=subnet_help,
        error_messages={"invalid_choice": "No such subnet, or it belongs to another team."},
    )
    groups = ModelIdsField(
        queryset=SecurityGroup.objects.none(), required=False, label="Security groups",
        help_text="None chosen: the team's default group (members reach each other, no other inbound).",
        error_messages={"invalid_choice": "No such security group, or it belongs to another team."},
    )
    return subnet, groups


def offer_network_choices(form: forms.Form, user) -> None:
    form.fields["subnet"].queryset = Subnet.objects.for_user(user, WRITE_ROLES).select_related("vpc__team")
    form.fields["subnet"].label_from_instance = lambda s: f"{s.vpc.team.name} · {s.vpc.name} / {s.name} ({s.cidr})"
    form.fields["security_groups"].queryset = SecurityGroup.objects.for_user(user, WRITE_ROLES).select_related("team")
    form.fields["security_groups"].label_from_instance = lambda g: f"{g.team.name} · {g.name}"
