from django.apps import AppConfig


class NetworkConfig(AppConfig):
    name = "network"
    verbose_name = "Networks and security groups"

    def ready(self):
        from instances import launch_options
        from monitoring import agent_links

        from . import agent_link, signals  # noqa: F401 (signals connects the lifecycle receiver)
        from .launch import NetworkChoices

        launch_options.register(NetworkChoices())
        agent_links.register(agent_link)
