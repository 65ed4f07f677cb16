from django.apps import AppConfig


class NetworkConfig(AppConfig):
    name = "network"
    verbose_name = "Networks and security groups"

    def ready(self):
        from instances import launch_options

        from . import signals  # noqa: F401 (connects the lifecycle receiver)
        from .launch import NetworkChoices

        launch_options.register(NetworkChoices())
