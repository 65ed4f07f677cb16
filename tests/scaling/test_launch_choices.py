"""Spot where the group allows it, on-demand when spot is dearer than its max price or
has no room, and "no capacity" recorded when nothing fits."""

from django.utils import timezone

from instances.models import Instance
from scaling import services


def _group(fleet, team, actor, **kw):
    values = {"gpu_model": fleet["h100"], "gpus_per_instance": 1, "pricing_model": "spot", "min_instances": 0,
              "max_instances": 4, "target_per_instance": 10, "scale_out_cooldown_s": 0, "scale_in_cooldown_s": 0}
    return services.create_group(actor=actor, team=team, name="sweep", **{**values, **kw})


def _push_and_evaluate(group, depth):
    now = timezone.now()
    services.push_queue_depth(group=group, queue_depth=depth, now=now)
    return services.evaluate_group(group, now=now)


def test_it_launches_spot_when_the_group_allows_it(fleet, acme, bob):
    group = _group(fleet, acme, bob, max_price="0.50")
    decision = _push_and_evaluate(group, 20)
    assert decision.running == 2
    assert set(Instance.objects.values_list("pricing_model", flat=True)) == {"spot"}


def test_spot_above_the_max_price_falls_back_to_on_demand(fleet, acme, bob):
    group = _group(fleet, acme, bob, max_price="0.30")  # spot is 0.40 in the test catalog
    decision = _push_and_evaluate(group, 10)
    assert (decision.action, decision.running) == ("scale_out", 1)
    assert Instance.objects.get().pricing_model == "on_demand"
    assert "spot at 0.4 per GPU-hour is above the max price 0.3" in decision.message


def test_no_capacity_is_recorded_with_what_did_fit(fleet, acme, bob):
    # Two hosts of 8 H100s: two 8-GPU instances fit, a third does not.
    group = _group(fleet, acme, bob, pricing_model="on_demand", gpus_per_instance=8, max_instances=3)
    decision = _push_and_evaluate(group, 30)
    assert (decision.desired, decision.running, decision.action, decision.reason) == (3, 2, "scale_out", "no_capacity")
    assert "No capacity" in decision.message
    again = services.evaluate_group(group, now=timezone.now())
    assert (again.action, again.reason, again.running) == ("none", "no_capacity", 2)


def test_a_stale_queue_depth_holds_the_group_where_it_is(fleet, acme, bob, settings):
    group = _group(fleet, acme, bob, pricing_model="on_demand", min_instances=1)
    first = _push_and_evaluate(group, 30)
    assert first.running == 3
    settings.SCALING_METRIC_STALE_S = 60
    later = services.evaluate_group(group, now=first.time + timezone.timedelta(minutes=5))
    assert (later.queue_depth, later.desired, later.action, later.reason) == (None, 3, "none", "no_metric")


def test_instances_boot_the_groups_image(fleet, acme, bob):
    from instances import images

    image = images.create_image(actor=bob, name="acme-worker", reference="registry.example.com/acme/worker:1.2",
                                gpu_models=[fleet["h100"]], team=acme)
    group = _group(fleet, acme, bob, pricing_model="on_demand", image=image)
    _push_and_evaluate(group, 10)
    assert Instance.objects.get().image == image


def test_a_retired_image_refuses_the_launch_with_its_reason(fleet, acme, bob, ops):
    from instances import images

    image = images.create_image(actor=ops, name="old-cuda", reference="registry.example.com/pub/old:11",
                                gpu_models=[fleet["h100"]])
    group = _group(fleet, acme, bob, pricing_model="on_demand", image=image)
    images.retire_image(actor=ops, image=image)
    decision = _push_and_evaluate(group, 10)
    assert (decision.action, decision.reason, decision.running) == ("none", "refused", 0)
    assert "retired" in decision.message
