"""The queue page: each job's position, wait, why it waits and cost so far, the same
figures as the API; a form to submit; other teams' jobs absent."""

import re

import pytest
from django.test import Client

from jobs import scheduler
from jobs.models import Job, JobState


def _client(user):
    client = Client()
    client.force_login(user)
    return client


def _row(html, job):
    return re.search(rf'<tr data-job="{job.pk}".*?</tr>', html, re.S).group(0)


def test_the_queue_page_shows_the_apis_figures(api, launch, submit, acme, globex, bob, charlie):
    launch(charlie, globex, name="a", count=8)
    launch(charlie, globex, name="b", count=4)
    running = submit(bob, acme, name="running", count=4)
    waiting = submit(bob, acme, name="waiting", count=8)
    behind = submit(bob, acme, name="behind", count=1)
    scheduler.run_queue(provision=False)
    html = _client(bob).get("/jobs/").content.decode()
    listed = {r["id"]: r for r in api(bob).get("/api/v1/jobs/").json()["results"]}
    assert listed[running.pk]["state"] == "running" and "on h100-b" in _row(html, running)
    for job in (waiting, behind):
        row, body = _row(html, job), listed[job.pk]
        assert f'<td class="num">{body["position"]}</td>' in row
        assert body["why_waiting"].replace("'", "&#x27;") in row
        assert f'<td class="num mono">{body["cost_so_far"]}</td>' in row
    assert "No idle capacity of H100-80GB: it needs 8 GPUs on one host (one NVLink group); the most idle there is 0." in _row(html, waiting)
    assert "Behind 1 job for H100-80GB." in _row(html, behind)


def test_a_member_submits_from_the_page_and_bad_input_is_a_400(submit, idle_price, acme, bob):
    client = _client(bob)
    form = {"team": acme.pk, "name": "sweep", "command": "python sweep.py", "gpu_model": "H100-80GB",
            "gpu_count": 9, "priority": "low"}
    refused = client.post("/jobs/", form)
    assert refused.status_code == 400 and "At most 8 H100-80GB GPUs fit on one host" in refused.content.decode()
    assert client.post("/jobs/", form | {"gpu_count": 2}).status_code == 302
    assert Job.objects.get().state == JobState.QUEUED


def test_outsiders_see_none_of_it_and_auditors_cannot_submit(submit, acme, bob, charlie, audrey):
    job = submit(bob, acme, count=1)
    assert f'data-job="{job.pk}"' not in _client(charlie).get("/jobs/").content.decode()
    assert _client(charlie).get(f"/jobs/{job.pk}/").status_code == 404
    assert _client(charlie).post(f"/jobs/{job.pk}/cancel/").status_code == 404
    page = _client(audrey).get("/jobs/").content.decode()
    assert f'data-job="{job.pk}"' in page and 'id="job-form"' not in page
    assert _client(audrey).post(f"/jobs/{job.pk}/cancel/").status_code == 403


def test_the_job_page_shows_runs_events_and_cancels(submit, acme, bob):
    job = submit(bob, acme, count=2)
    scheduler.run_queue(provision=False)
    client = _client(bob)
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "in idle capacity after waiting" in page and "train-run-1" in page
    assert client.post(f"/jobs/{job.pk}/cancel/").status_code == 302
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED and job.instance.state == "terminated"


@pytest.mark.parametrize("field, value", [("deadline", "9999-12-31T23:00:00-05:00"), ("deadline", "1999-01-01 00:00"),
                                          ("security_groups", str(2**64)), ("security_groups", str(2**63))])
def test_a_deadline_or_group_out_of_range_is_named_on_the_form(idle_price, acme, bob, field, value):
    form = {"team": acme.pk, "name": "sweep", "command": "python sweep.py", "gpu_model": "H100-80GB",
            "gpu_count": 2, "priority": "low", field: value}
    refused = _client(bob).post("/jobs/", form)
    assert refused.status_code == 400 and refused.context["form"].errors[field]
    assert not Job.objects.exists()


def test_the_api_refuses_a_deadline_out_of_range(api, idle_price, acme, bob):
    body = {"team": acme.pk, "name": "sweep", "command": "python sweep.py", "gpu_model": "H100-80GB", "gpu_count": 2,
            "deadline": "9999-12-31T23:59:00Z"}
    response = api(bob).post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 400 and "between 2000 and 2199" in response.json()["deadline"][0]
