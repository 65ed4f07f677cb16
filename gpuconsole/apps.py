from django.apps import AppConfig


class GpuConsoleConfig(AppConfig):
    """The project shell: settings, URLs, ASGI, routing and the demo commands; no models."""

    name = "gpuconsole"
    verbose_name = "GPU Console"
