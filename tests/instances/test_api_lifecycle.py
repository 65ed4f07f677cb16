def test_stop_then_start_through_the_api(api, bob, acme_instance, django_capture_on_commit_callbacks):
    client = api(bob)
    with django_capture_on_commit_callbacks(execute=True):
        stopped = client.post(f"/api/v1/instances/{acme_instance.pk}/stop/")
    assert stopped.json()["state"] == "stopping"
    acme_instance.refresh_from_db()
    assert acme_instance.state == "stopped"
    with django_capture_on_commit_callbacks(execute=True):
        started = client.post(f"/api/v1/instances/{acme_instance.pk}/start/")
    assert started.status_code == 200
    acme_instance.refresh_from_db()
    assert acme_instance.state == "running"


def test_invalid_transition_answers_409_with_the_reason(api, bob, acme_instance):
    response = api(bob).post(f"/api/v1/instances/{acme_instance.pk}/start/")
    assert response.status_code == 409
    assert response.json() == {
        "detail": "Instance acme-train is running; only a stopped instance can start.",
        "code": "invalid_transition",
    }


def test_no_capacity_answers_409(api, bob, acme, fleet):
    body = {"team": acme.pk, "name": "big", "gpu_model": "H200-141GB", "gpu_count": 1, "pricing_model": "spot"}
    assert api(bob).post("/api/v1/instances/", body).status_code == 201
    response = api(bob).post("/api/v1/instances/", body | {"name": "big2"})
    assert response.status_code == 409
    assert response.json()["code"] == "no_capacity"


def test_detail_lists_lifecycle_events(api, bob, acme_instance):
    events = api(bob).get(f"/api/v1/instances/{acme_instance.pk}/").json()["events"]
    assert [e["to_state"] for e in events] == ["pending", "running"]


def test_instances_filter_by_state(api, bob, acme_instance, launch, acme):
    launch(bob, acme, name="waiting")
    names = [i["name"] for i in api(bob).get("/api/v1/instances/?state=pending").json()["results"]]
    assert names == ["waiting"]
