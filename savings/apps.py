from django.apps import AppConfig


class SavingsConfig(AppConfig):
    name = "savings"
    verbose_name = "Savings advice and idle stop"
