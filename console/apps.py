from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "console"
    verbose_name = "Console: accounts and teams"

    def ready(self):
        from . import schema  # noqa: F401  (registers the OpenAPI auth extension)
