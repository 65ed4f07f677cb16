from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "audit"
    verbose_name = "Audit log"

    def ready(self):
        from console import events

        from .services import record_event, record_refusal

        events.connect(recorder=record_event, refuser=record_refusal)
