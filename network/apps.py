from django.apps import AppConfig


class NetworkConfig(AppConfig):
    name = "network"
    verbose_name = "Networks and security groups"

    def ready(self):
        from . import signals  # noqa: F401 (connects the lifecycle receiver)
