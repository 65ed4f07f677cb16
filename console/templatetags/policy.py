"""Templates ask the same table as views: ``{% load policy %}``, then
``{% if user|may:"fleet.operate" %}`` (in any team) or
``{% may_on user "alert.act" alert as can_act %}`` (on one object or team)."""

from django import template

from console import policy

register = template.Library()


@register.filter(name="may")
def may(user, action: str) -> bool:
    return policy.may(user, action)


@register.simple_tag
def may_on(user, action: str, target) -> bool:
    return policy.may(user, action, target)
