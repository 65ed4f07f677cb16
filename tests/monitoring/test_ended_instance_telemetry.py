"""An instance that has ended keeps its chart labels (gpu0 · H100-80GB, as while it ran,
never a bare UUID) and shows no "live" pill: nothing of it is live any more."""

from datetime import timedelta

from django.utils import timezone

from instances import lifecycle as instance_lifecycle
from monitoring.models import Rollup1h


def labels(client, instance) -> list[str]:
    return [d["label"] for d in client.get(f"/monitoring/instances/{instance.pk}/panel/").json()["devices"]]


def test_the_labels_stay_after_the_instance_ends(client, bob, acme_instance):
    client.force_login(bob)
    running = labels(client, acme_instance)
    hour = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    Rollup1h.objects.bulk_create(Rollup1h(gpu=g, instance=acme_instance, team=acme_instance.team, bucket=hour,
                                          samples=60, observed_s=3600) for g in acme_instance.gpus.all())
    instance_lifecycle.terminate_instance(actor=bob, instance=acme_instance)
    ended = labels(client, acme_instance)
    assert ended == running == ["gpu0 · H100-80GB", "gpu1 · H100-80GB"]
    assert not any("GPU-" in label for label in ended)


def test_an_ended_instance_has_no_live_pill(client, bob, acme_instance):
    client.force_login(bob)
    assert "data-live-status" in client.get(f"/instances/{acme_instance.pk}/").content.decode()
    instance_lifecycle.terminate_instance(actor=bob, instance=acme_instance)
    page = client.get(f"/instances/{acme_instance.pk}/").content.decode()
    assert "data-live-status" not in page
    assert 'id="not-live"' in page and ">terminated</span>" in page
