from django.apps import AppConfig
from django.db.models.signals import post_save


class MonitoringConfig(AppConfig):
    name = "monitoring"
    verbose_name = "Telemetry and alerts"

    def ready(self) -> None:
        from console.models import Team

        post_save.connect(_default_rules, sender=Team, dispatch_uid="monitoring.default_rules")


def _default_rules(sender, instance, created, raw=False, **kwargs) -> None:
    """Every new team starts with the default alert rules (rules.TEAM_DEFAULTS)."""
    if created and not raw:
        from .services import ensure_default_rules

        ensure_default_rules(instance, audit=False)
