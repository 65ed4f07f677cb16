from django.apps import AppConfig


class SavingsConfig(AppConfig):
    name = "savings"
    verbose_name = "Savings advice and idle stop"

    def ready(self):
        # Billing's FOCUS export reads energy per charge row through this (imports point one way).
        from billing import exports

        from .energy import billed_kwh, charge_energy

        exports.register_energy(charge_energy, billed_kwh)
