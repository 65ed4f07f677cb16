"""python manage.py seed_demo — idempotent demo data for every app."""

from django.core.management.base import BaseCommand
from tqdm import tqdm

from audit import demo as audit_demo
from billing import demo as billing_demo
from console import demo as console_demo
from instances import demo as instances_demo
from jobs import demo as jobs_demo
from monitoring import demo as monitoring_demo
from scaling import demo as scaling_demo

# After users, fleet and instances, each app adds its own history: ``seed(users=, stdout=)``.
LATER = (("telemetry", monitoring_demo), ("scaling", scaling_demo), ("billing", billing_demo), ("jobs", jobs_demo),
         ("audit", audit_demo))


class Command(BaseCommand):
    help = "Create (or complete) the demo teams, users, fleet, instances and history. Safe to run twice."

    def handle(self, *args, **options):
        bar = tqdm(total=3 + len(LATER), desc="seeding demo", unit="step", file=self.stderr._out, disable=None)
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
        bar.close()
        self.stdout.write(self.style.SUCCESS("Demo data ready."))
        self.stdout.write("Logins (password 'demo' for all):")
        for username, what in console_demo.LOGINS:
            self.stdout.write(f"  {username:8} {what}")

