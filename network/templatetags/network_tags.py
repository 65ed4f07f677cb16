"""The network panel of an instance page and a host's rules state, for templates."""

from django import template
from django.utils.html import format_html

from console.policy import may

from .. import rulesets
from ..models import Interface, SecurityGroup

register = template.Library()


def _state(interface: Interface) -> rulesets.Applied:
    host_id = interface.instance.host_id
    if interface.released_at is not None or host_id is None:
        return rulesets.Applied("none", "not on a host")
    return rulesets.applied_state(getattr(interface.instance.host, "network_rules", None))


@register.inclusion_tag("network/_instance.html", takes_context=True)
def instance_network(context, instance):
    interface = (Interface.objects.filter(instance=instance).select_related("subnet__vpc", "instance__host__network_rules")
                 .prefetch_related("groups").first())
    user = context["request"].user
    may_change = may(user, "team.write", instance)
    return {
        "interface": interface, "state": _state(interface) if interface else None, "may_change": may_change,
        "choices": SecurityGroup.objects.filter(team_id=instance.team_id) if interface else [],
        "csrf_token": context.get("csrf_token"),
    }


@register.simple_tag
def rules_state(interface: Interface):
    state = _state(interface)
    return format_html('<span class="badge state-{}">{}</span> {}', state.state, state.state, state.text)
