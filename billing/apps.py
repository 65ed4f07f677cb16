from django.apps import AppConfig


class BillingConfig(AppConfig):
    name = "billing"
    verbose_name = "Billing"

    def ready(self):
        # Instances ask billing for prices through this book (imports point one way).
        from instances import catalog
        from monitoring import figures

        from .budgets import month_to_date
        from .rates import BillingPriceBook

        catalog.register(BillingPriceBook())
        figures.register_team_cost(month_to_date)
