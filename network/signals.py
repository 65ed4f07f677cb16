"""Instances' lifecycle, seen from the network: a launch made within
``interfaces.on_network`` gets its interface, an ended instance (terminated, preempted or
failed: none runs again) frees its address, and every state change updates the rules of
the hosts it was or is on."""

from django.db.models.signals import post_save
from django.dispatch import receiver

from instances.models import Instance, State

from . import interfaces, rulesets
from .models import Interface

ENDED = (State.TERMINATED, State.PREEMPTED, State.FAILED)


@receiver(post_save, sender=Instance, dispatch_uid="network-instance-state")
def instance_saved(sender, instance: Instance, created: bool, update_fields=None, **kwargs):
    if created:
        interfaces.attach_requested(instance)
        return
    if not update_fields or "state" not in update_fields:
        return
    interface = Interface.objects.filter(instance_id=instance.pk).only("placed_on_id", "released_at").first()
    if interface is None:
        return
    if instance.state in ENDED:
        interfaces.release(actor="system", instance=instance)
    rulesets.resync_on_commit(instance.team_id, hosts=[instance.host_id, interface.placed_on_id])
