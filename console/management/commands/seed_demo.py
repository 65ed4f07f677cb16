"""python manage.py seed_demo — idempotent demo data for every app."""

import importlib

from django.core.management.base import BaseCommand
from tqdm import tqdm

from console import demo as console_demo
from instances import demo as instances_demo

# Each app may add its own demo data through ``<app>.demo.seed(users=…, progress=…)``.
LATER_APPS = ("monitoring", "billing", "audit")


class Command(BaseCommand):
    help = "Create (or complete) the demo teams, users, fleet, instances and history. Safe to run twice."

    def handle(self, *args, **options):
        steps = [("users and teams", None), ("fleet", None), ("instances", None)]
        steps += [(f"{app} demo data", app) for app in LATER_APPS if _has_demo(app)]
        bar = tqdm(total=len(steps), desc="seeding demo", unit="step", file=self.stderr._out, disable=None)
        users = console_demo.seed()
        bar.update(1)
        instances_demo.seed_fleet(actor=users["ops"])
        bar.update(1)
        instances_demo.seed_instances(users=users)
        bar.update(1)
        for label, app in steps[3:]:
            bar.set_postfix_str(label)
            importlib.import_module(f"{app}.demo").seed(users=users, stdout=self.stdout)
            bar.update(1)
        bar.close()
        self.stdout.write(self.style.SUCCESS("Demo data ready."))
        self.stdout.write("Logins (password 'demo' for all):")
        for username, what in console_demo.LOGINS:
            self.stdout.write(f"  {username:8} {what}")


def _has_demo(app: str) -> bool:
    try:
        importlib.import_module(f"{app}.demo")
    except ModuleNotFoundError as exc:
        if exc.name != f"{app}.demo":
            raise
        return False
    return True
