"""Periodic telemetry work: thin adapters over rollups, retention and health verdicts.

Each run is bounded and idempotent, so a missed or repeated run costs nothing but time.
"""

from celery import shared_task

from . import fanout, partitions, rollups

SCHEDULE = {
    "monitoring.rollup_1m": (30, "monitoring.tasks.rollup_1m"),
    "monitoring.rollup_1h": (300, "monitoring.tasks.rollup_1h"),
    "monitoring.retention": (600, "monitoring.tasks.retention"),
    "monitoring.partitions": (3600, "monitoring.tasks.make_partitions"),
    "monitoring.stale": (5, "monitoring.tasks.publish_stale"),
    "monitoring.health": (30, "monitoring.tasks.evaluate_health"),
    "monitoring.diagnostics": (600, "monitoring.tasks.expire_diagnostics"),
}


@shared_task
def rollup_1m() -> int:
    return rollups.run("1m")


@shared_task
def rollup_1h() -> int:
    return rollups.run("1h")


@shared_task
def retention() -> dict:
    return rollups.expire()


@shared_task
def make_partitions() -> dict:
    return partitions.maintain()


@shared_task
def publish_stale() -> int:
    return fanout.publish_stale()


@shared_task
def evaluate_health() -> int:
    from . import verdicts

    return len(verdicts.evaluate())


@shared_task
def expire_diagnostics() -> int:
    from . import diagnostics

    return diagnostics.expire()
