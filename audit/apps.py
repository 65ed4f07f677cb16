from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "audit"
    verbose_name = "Audit log"

    def ready(self):
        from . import sealer, tasks

        sealer.when_checkpoint_due(lambda: tasks.write_checkpoint.delay())
