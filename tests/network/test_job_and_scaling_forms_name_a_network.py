"""The job and scaling group forms offer the team's subnets and groups, store the
choice, and name another team's on its field."""

from jobs.models import Job
from network import vpcs
from scaling.models import ScalingGroup

JOB = {"name": "train", "command": "python train.py", "gpu_model": "H100-80GB", "gpu_count": 1,
       "priority": "normal"}
GROUP = {"name": "workers", "gpu_model": "H100-80GB", "gpus_per_instance": 1, "pricing_model": "on_demand",
         "min_instances": 0, "max_instances": 2, "metric_source": "pushed", "target_per_instance": 10,
         "scale_out_cooldown_s": 120, "scale_in_cooldown_s": 300}


def test_the_job_form_stores_the_chosen_subnet_and_groups(client, fleet, acme, bob, acme_net):
    train = vpcs.create_subnet(actor=bob, vpc=acme_net["vpc"], name="train", cidr="10.0.64.0/24")
    client.force_login(bob)
    assert "Acme · default / train (10.0.64.0/24)" in client.get("/jobs/").content.decode()
    r = client.post("/jobs/", {**JOB, "team": acme.pk, "subnet": train.pk, "security_groups": [acme_net["group"].pk]})
    assert r.status_code == 302, r.content.decode()[:2000]
    job = Job.objects.get()
    assert job.network == {"subnet": train.pk, "security_groups": [acme_net["group"].pk]}
    assert "subnet train · groups default" in client.get(f"/jobs/{job.pk}/").content.decode()


def test_the_scaling_form_stores_the_chosen_subnet_and_groups(client, fleet, acme, bob, acme_net):
    client.force_login(bob)
    r = client.post("/scaling-groups/new/", {**GROUP, "team": acme.pk, "subnet": acme_net["subnet"].pk,
                                             "security_groups": [acme_net["group"].pk]})
    assert r.status_code == 302, r.content.decode()[:2000]
    group = ScalingGroup.objects.get()
    assert group.network == {"subnet": acme_net["subnet"].pk, "security_groups": [acme_net["group"].pk]}
    assert f'value="{acme_net["subnet"].pk}" selected' in client.get(f"/scaling-groups/{group.pk}/edit/").content.decode()
    assert "subnet default · groups default" in client.get(f"/scaling-groups/{group.pk}/").content.decode()


def test_another_teams_subnet_is_refused_on_its_field(client, fleet, acme, globex, bob, charlie):
    _, subnet, _ = vpcs.ensure_defaults(actor=charlie, team=globex)
    client.force_login(bob)
    for url, body in (("/jobs/", JOB), ("/scaling-groups/new/", GROUP)):
        r = client.post(url, {**body, "team": acme.pk, "subnet": subnet.pk})
        assert r.status_code == 400
        assert r.context["form"].errors["subnet"] == ["No such subnet, or it belongs to another team."]
    assert not Job.objects.exists() and not ScalingGroup.objects.exists()
