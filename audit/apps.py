from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "audit"
    verbose_name = "Audit log"

    def ready(self):
        from console import events

        from . import sealer, tasks
        from .recording import record_event
        from .refusals import record_refusal

        events.connect(recorder=record_event, refuser=record_refusal)

        sealer.when_checkpoint_due(lambda: tasks.write_checkpoint.delay())
