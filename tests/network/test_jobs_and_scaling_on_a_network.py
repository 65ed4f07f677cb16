"""Instances launched by the job queue and by scaling groups get an interface, as any
launch does: the subnet and groups the job or group names (the team's defaults where
none), so their hosts' rulesets carry them."""

from datetime import timedelta

import pytest
from django.utils import timezone

from audit.models import AuditEvent
from billing import price_changes as billing_price_changes
from instances import preemption as instance_preemption
from jobs import scheduler as job_scheduler
from jobs import submission as job_submission
from jobs.models import Job, JobState
from network import rulesets, security_groups, vpcs
from network.models import Interface
from scaling import services as scaling_services
from scaling.models import ScalingGroup

JOB = {"name": "train", "command": "python train.py", "gpu_model": "H100-80GB", "gpu_count": 1,
       "priority": "normal"}
GROUP = {"name": "workers", "gpu_model": "H100-80GB", "gpus_per_instance": 1, "min_instances": 1,
         "max_instances": 2, "target_per_instance": 10}


@pytest.fixture
def https(acme, bob, acme_net):
    """Acme's group open on 443 to its VPC, and a subnet of its own."""
    group = security_groups.create_group(actor=bob, team=acme, name="https", rules=[
        {"direction": "inbound", "protocol": "tcp", "port_from": 443, "cidr": "10.0.0.0/16"}])
    subnet = vpcs.create_subnet(actor=bob, vpc=acme_net["vpc"], name="train", cidr="10.0.64.0/24")
    return {"group": group, "subnet": subnet}


def in_ruleset(instance):
    interfaces, _ = rulesets.desired(instance.host_id)
    return {i.ifname: i for i in interfaces}.get(f"gc{instance.pk}")


def started(job):
    job_scheduler.run_queue(now=timezone.now(), provision=False)
    job.refresh_from_db()
    return job.instance


def test_a_jobs_run_is_in_its_hosts_ruleset_with_its_groups_rules(api, fleet, acme, bob, https):
    r = api(bob).post("/api/v1/jobs/", {**JOB, "team": acme.pk, "subnet": https["subnet"].pk,
                                        "security_groups": [https["group"].pk]}, format="json")
    assert r.status_code == 201, r.json()
    instance = started(Job.objects.get(pk=r.json()["id"]))
    rules = in_ruleset(instance)
    assert rules.address == "10.0.64.2/32"
    assert [(x.proto, x.peers, x.ports) for x in rules.inbound] == [("tcp", ["10.0.0.0/16"], (443, 443))]
    assert AuditEvent.objects.filter(action="network.interface.attach", target_id=str(instance.pk)).exists()


def test_a_job_naming_nothing_runs_in_the_teams_defaults(submit_job, fleet, acme, bob):
    instance = started(submit_job(bob, acme))
    assert instance.interface.subnet.is_default
    assert [g.name for g in instance.interface.groups.all()] == ["default"]
    assert in_ruleset(instance).address == f"{instance.interface.address}/32"


def test_a_preempted_jobs_new_instance_gets_its_own_address_and_the_first_is_freed(submit_job, fleet, acme, bob,
                                                                                   https):
    since = timezone.now() - timedelta(days=1)
    billing_price_changes.set_price(actor="system", sku="H100-80GB", kind="idle", hourly="0.25", effective_from=since,
                               now=since)
    job = submit_job(bob, acme, subnet=https["subnet"].pk, priority="low")
    first = started(job)
    instance_preemption.preempt_instance(instance=first)
    second = started(job)
    assert second != first
    assert Interface.objects.get(instance=first).released_at is not None
    assert Interface.objects.get(instance=second, released_at__isnull=True).address == "10.0.64.2"
    assert in_ruleset(first) is None


def test_a_jobs_ended_run_frees_its_address(submit_job, fleet, acme, bob):
    job = submit_job(bob, acme)
    instance = started(job)
    job_submission.cancel_job(actor=bob, job=job)
    assert Interface.objects.get(instance=instance).released_at is not None


def test_a_scaling_groups_new_instance_is_in_its_hosts_ruleset(api, fleet, acme, bob, https):
    r = api(bob).post("/api/v1/scaling-groups/", {**GROUP, "team": acme.pk, "subnet": https["subnet"].pk,
                                                  "security_groups": [https["group"].pk]}, format="json")
    assert r.status_code == 201, r.json()
    group = ScalingGroup.objects.get(pk=r.json()["id"])
    scaling_services.evaluate_group(group, provision=False)
    instance = scaling_services.active_instances(group).get()
    rules = in_ruleset(instance)
    assert rules.address.startswith("10.0.64.")
    assert [(x.proto, x.peers, x.ports) for x in rules.inbound] == [("tcp", ["10.0.0.0/16"], (443, 443))]


def test_a_scaling_groups_changed_groups_apply_to_its_next_instances(api, fleet, acme, bob, https, acme_net):
    group = scaling_services.create_group(actor=bob, team=acme, **{**GROUP, "gpu_model": fleet["h100"]})
    r = api(bob).patch(f"/api/v1/scaling-groups/{group.pk}/", {"security_groups": [https["group"].pk]},
                       format="json")
    assert r.status_code == 200, r.json()
    scaling_services.evaluate_group(group, provision=False)
    instance = scaling_services.active_instances(group).get()
    assert [g.name for g in instance.interface.groups.all()] == ["https"]
    assert instance.interface.subnet == acme_net["subnet"]


@pytest.mark.parametrize("path, body", [("/api/v1/jobs/", JOB), ("/api/v1/scaling-groups/", GROUP)])
@pytest.mark.parametrize("field", ["subnet", "security_groups"])
def test_another_teams_subnet_or_group_is_refused_by_name(api, fleet, acme, globex, bob, charlie, path, body, field):
    _, subnet, group = vpcs.ensure_defaults(actor=charlie, team=globex)
    value = subnet.pk if field == "subnet" else [group.pk]
    r = api(bob).post(path, {**body, "team": acme.pk, field: value}, format="json")
    assert r.status_code == 400
    assert "is not one of team Acme's" in r.json()[field][0]
    assert not Job.objects.exists() and not ScalingGroup.objects.exists()


def test_a_job_whose_subnet_was_deleted_waits_and_says_why(submit_job, fleet, acme, bob, https, monkeypatch):
    monkeypatch.setattr(job_submission, "kick", lambda: None)  # it stays queued until the pass below
    subnet_id = https["subnet"].pk
    job = submit_job(bob, acme, subnet=subnet_id)
    vpcs.delete_subnet(actor=bob, subnet=https["subnet"])
    assert started(job) is None
    job.refresh_from_db()
    assert job.state == JobState.QUEUED
    assert f"Subnet {subnet_id} is not one of team Acme's subnets" in job.wait_note


@pytest.fixture
def submit_job(fleet):
    def _submit(actor, team, priority="normal", **network):
        return job_submission.submit_job(actor=actor, team=team, name="train", command="python train.py",
                                       gpu_model=fleet["h100"], gpu_count=1, priority=priority, **network)

    return _submit
