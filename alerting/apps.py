from django.apps import AppConfig
from django.db.models.signals import post_delete, post_save


class AlertingConfig(AppConfig):
    name = "alerting"
    verbose_name = "Alerts"

    def ready(self) -> None:
        from console.models import Team
        from instances.models import Instance
        from monitoring import alert_hooks

        from . import feed, rule_cache
        from .models import AlertRule

        alert_hooks.connect(feed.Telemetry())
        post_save.connect(_default_rules, sender=Team, dispatch_uid="alerting.default_rules")
        # Every saved or deleted rule, cascades (team, instance, host, GPU model) included,
        # changes the rules' version once committed (rule_cache).
        post_save.connect(rule_cache.rule_saved_or_deleted, sender=AlertRule, dispatch_uid="alerting.rule_saved")
        post_delete.connect(rule_cache.rule_saved_or_deleted, sender=AlertRule, dispatch_uid="alerting.rule_deleted")
        # The TFLOP/s estimate's basis (its peak) follows the instance's precision, and
        # ingest keeps it with the rules.
        post_save.connect(rule_cache.precision_saved, sender=Instance, dispatch_uid="alerting.precision_saved")


def _default_rules(sender, instance, created, raw=False, **kwargs) -> None:
    """Every new team starts with the default alert rules (rules.TEAM_DEFAULTS)."""
    if created and not raw:
        from .services import ensure_default_rules

        ensure_default_rules(instance, audit=False)
