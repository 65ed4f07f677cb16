"""Celery app: a real worker and beat with REDIS_URL, tasks in-process otherwise."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuconsole.settings")

app = Celery("gpuconsole")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.on_after_finalize.connect
def _install_beat_schedule(sender, **kwargs):
    from gpuconsole.schedule import beat_schedule

    sender.conf.beat_schedule = beat_schedule()
