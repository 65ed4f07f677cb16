import importlib
import importlib.util

from django.apps import apps

from gpuconsole.schedule import _resolve, beat_schedule, entries


def _declared():
    for config in apps.get_app_configs():
        if importlib.util.find_spec(f"{config.name}.tasks") is not None:
            yield from getattr(importlib.import_module(f"{config.name}.tasks"), "SCHEDULE", {}).items()


def test_every_periodic_task_an_app_declares_is_scheduled():
    declared = dict(_declared())
    assert "savings.idle_stop" in declared
    assert entries() == declared
    assert set(beat_schedule()) == set(declared)


def test_every_scheduled_path_names_a_task():
    for name, (seconds, path) in entries().items():
        assert seconds > 0, name
        assert callable(_resolve(path)), name
