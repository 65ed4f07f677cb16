"""python manage.py seed_demo — idempotent demo data for every app."""

from datetime import timedelta

from django.core.management.base import BaseCommand
from django.db import transaction
from django.utils import timezone
from tqdm import tqdm

from audit import demo as audit_demo
from audit import recording as audit_recording
from billing import demo as billing_demo
from console.request_context import recorded_at
from gpuconsole import demo as console_demo
from instances import demo as instances_demo
from jobs import demo as jobs_demo
from monitoring import demo as monitoring_demo
from scaling import demo as scaling_demo

# After users, fleet and instances, each app adds its own history: ``seed(users=, stdout=)``.
# Telemetry last: its rollups follow every allocation the others made.
LATER = (("scaling", scaling_demo), ("billing", billing_demo), ("jobs", jobs_demo), ("telemetry", monitoring_demo))
# The teams, users and fleet were set up before any of the history (billing's reaches
# back four months, the image catalog 120 days).
SET_UP_DAYS_AGO = 150


class Command(BaseCommand):
    help = "Create (or complete) the demo teams, users, fleet, instances and history. Safe to run twice."

    def handle(self, *args, **options):
        bar = tqdm(total=4 + len(LATER), desc="seeding demo", unit="step", file=self.stderr._out, disable=None)
        # One transaction, its audit events appended oldest first: each app writes its
        # own stretch of history in turn, and the audit log reads in time order.
        with transaction.atomic(), audit_recording.in_time_order():
            with recorded_at(timezone.now() - timedelta(days=SET_UP_DAYS_AGO)):
                users = console_demo.seed()
                bar.update(1)
                instances_demo.seed_fleet(actor=users["ops"])
            billing_demo.seed_catalog(users=users)  # a launch needs a price
            bar.update(1)
            instances_demo.seed_instances(users=users)
            bar.update(1)
            for label, module in LATER:
                bar.set_postfix_str(label)
                module.seed(users=users, stdout=self.stdout)
                bar.update(1)
            billing_demo.close_months(stdout=self.stdout)  # once all the history is in
        audit_demo.seed(users=users, stdout=self.stdout)
        bar.update(1)
        bar.close()
        self.stdout.write(self.style.SUCCESS("Demo data ready."))
        self.stdout.write("Logins (password 'demo' for all):")
        for username, what in console_demo.LOGINS:
            self.stdout.write(f"  {username:8} {what}")

