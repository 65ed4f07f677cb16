"""The open alerts of one instance, for the instance page (which lives in instances/)."""

from django import template

from alerting.models import ACTIVE_STATES, Alert

register = template.Library()


@register.inclusion_tag("monitoring/_alerts_table.html", takes_context=True)
def instance_alerts(context, instance):
    user = context["request"].user
    found = Alert.objects.for_user(user).filter(instance=instance, state__in=ACTIVE_STATES).select_related("host")
    return {"alerts": list(found[:20])}
