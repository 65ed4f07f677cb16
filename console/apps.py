from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "console"
    verbose_name = "Console: accounts and teams"

    def ready(self):
        # schema registers the OpenAPI auth extension; sessions records sign-ins and -outs.
        from . import lockout, schema, sessions  # noqa: F401
        from .api.fields import bound_model_datetimes
        from .validators import ascii_decimal_fields

        bound_model_datetimes()
        ascii_decimal_fields()
