from django.apps import AppConfig


class InstancesConfig(AppConfig):
    name = "instances"
    verbose_name = "Instances and GPU inventory"

    def ready(self):
        from . import lifecycle, tasks

        lifecycle.run_in_background("provision", lambda pk: tasks.provision_instance.delay(pk))
        lifecycle.run_in_background("finish_stop", lambda pk: tasks.finish_stop.delay(pk))
