"""/api/v1/jobs/: submit, list, detail and cancel, team-scoped; every bad input a 400."""

from datetime import timedelta

import pytest
from django.utils import timezone

from instances.models import Image
from jobs import scheduler
from jobs.models import Job, JobState


def _body(team, **changes):
    body = {"team": team.pk, "name": "sweep", "command": "python sweep.py", "gpu_model": "H100-80GB",
            "gpu_count": 2, "priority": "low"}
    return body | changes


def test_a_member_submits_a_job_and_sees_its_place_in_the_queue(api, idle_price, acme, bob):
    client = api(bob)
    answer = client.post("/api/v1/jobs/", _body(acme), format="json")
    assert answer.status_code == 201, answer.json()
    job = Job.objects.get(pk=answer.json()["id"])
    assert job.state == JobState.QUEUED and job.created_by == bob
    listed = client.get("/api/v1/jobs/").json()["results"]
    assert [(r["id"], r["position"], r["why_waiting"]) for r in listed] == [
        (job.pk, 1, "Waiting for the scheduler's next pass.")]
    detail = client.get(f"/api/v1/jobs/{job.pk}/").json()
    assert [e["kind"] for e in detail["events"]] == ["submit"]
    assert detail["price_per_hour"] == "0.500000"


LONG = "x" * 4097


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"command": ""}, "command"),
        ({"command": "   "}, "command"),
        ({"command": LONG}, "command"),
        ({"command": "run\x00me"}, "command"),
        ({"gpu_count": 0}, "gpu_count"),
        ({"gpu_count": -1}, "gpu_count"),
        ({"gpu_count": 9}, "gpu_count"),  # no host holds more than 8 H100s
        ({"gpu_count": "two"}, "gpu_count"),
        ({"gpu_model": "Z100"}, "gpu_model"),
        ({"priority": "urgent"}, "priority"),
        ({"deadline": "2020-01-01T00:00:00Z"}, "deadline"),
        ({"deadline": "tomorrow"}, "deadline"),
        ({"name": "<script>"}, "name"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(api, idle_price, acme, bob, changes, field):
    answer = api(bob).post("/api/v1/jobs/", _body(acme, **changes), format="json")
    assert answer.status_code == 400, answer.content
    assert field in answer.json()
    assert not Job.objects.exists()


def _image(name, fleet, team=None):
    image = Image.objects.create(name=name, reference=f"registry.example.com/{name}:1", team=team,
                                 visibility="private" if team else "public")
    image.gpu_models.add(fleet["h100"])
    return image


def test_a_job_runs_on_the_image_it_names_and_unknown_images_are_a_400(api, idle_price, acme, globex, bob):
    mine = _image("pytorch", idle_price)
    theirs = _image("globex-own", idle_price, team=globex)
    client = api(bob)
    for bad in (theirs.pk, 999999, "pytorch"):
        answer = client.post("/api/v1/jobs/", _body(acme, image=bad), format="json")
        assert answer.status_code == 400 and "image" in answer.json(), bad
    answer = client.post("/api/v1/jobs/", _body(acme, image=mine.pk), format="json")
    assert answer.status_code == 201 and answer.json()["image"]["name"] == "pytorch"
    scheduler.run_queue(provision=False)
    assert Job.objects.get().instance.image == mine


def test_a_model_without_an_idle_price_is_refused(api, fleet, acme, bob):
    answer = api(bob).post("/api/v1/jobs/", _body(acme), format="json")
    assert answer.status_code == 409
    assert answer.json()["code"] == "no_price"


def test_other_teams_jobs_are_absent_and_auditors_cannot_submit(api, submit, acme, bob, charlie, audrey):
    job = submit(bob, acme, count=1)
    assert api(charlie).get(f"/api/v1/jobs/{job.pk}/").status_code == 404
    assert api(charlie).post(f"/api/v1/jobs/{job.pk}/cancel/").status_code == 404
    assert api(charlie).get("/api/v1/jobs/").json()["results"] == []
    assert api(audrey).get(f"/api/v1/jobs/{job.pk}/").status_code == 200
    assert api(audrey).post("/api/v1/jobs/", _body(acme), format="json").status_code == 403
    assert api(audrey).post(f"/api/v1/jobs/{job.pk}/cancel/").status_code == 403


def test_cancel_twice_is_a_409(api, submit, acme, bob):
    job = submit(bob, acme, count=1, deadline=timezone.now() + timedelta(days=1))
    client = api(bob)
    assert client.post(f"/api/v1/jobs/{job.pk}/cancel/").json()["state"] == "cancelled"
    again = client.post(f"/api/v1/jobs/{job.pk}/cancel/")
    assert again.status_code == 409 and again.json()["code"] == "invalid_job_state"
