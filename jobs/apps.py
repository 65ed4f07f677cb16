from django.apps import AppConfig

# Lifecycle states in which an instance has given its GPUs back.
RELEASED = ("stopped", "terminated", "preempted", "failed")


class JobsConfig(AppConfig):
    name = "jobs"
    verbose_name = "Job queue"

    def ready(self):
        # When any instance gives its GPUs back, the queue gets a pass once that commits.
        # (Instances never import jobs: imports point one way.)
        from django.db.models.signals import post_save

        from instances.models import LifecycleEvent

        from . import submission, tasks

        post_save.connect(_capacity_freed, sender=LifecycleEvent, dispatch_uid="jobs.capacity_freed")
        submission.run_passes_with(lambda: tasks.run_queue.delay())


def _capacity_freed(sender, instance, created, **kwargs):
    if created and instance.to_state in RELEASED:
        from .submission import kick

        kick()
