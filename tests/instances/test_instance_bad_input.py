import pytest

from instances.models import Instance

GOOD = {"name": "job-1", "gpu_model": "H100-80GB", "gpu_count": 1, "pricing_model": "on_demand"}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"gpu_model": "V100-16GB"}, "gpu_model"),
        ({"gpu_count": 0}, "gpu_count"),
        ({"gpu_count": 9}, "gpu_count"),
        ({"gpu_count": "two"}, "gpu_count"),
        ({"pricing_model": "free"}, "pricing_model"),
        ({"name": "bad\nname"}, "name"),
        ({"name": "bell\x07"}, "name"),
        ({"name": ""}, "name"),
        ({"name": "x" * 64}, "name"),
        ({"slice_profile": "7g.80gb"}, "slice_profile"),
        ({"region": "mars-1"}, "region"),
    ],
)
def test_bad_launch_fields_are_named_and_nothing_is_written(api, bob, acme, fleet, change, field):
    response = api(bob).post("/api/v1/instances/", {"team": acme.pk} | GOOD | change, format="json")
    assert response.status_code == 400
    assert field in response.json()
    assert not Instance.objects.exists()


def test_count_above_one_host_names_the_limit(api, bob, acme, fleet):
    response = api(bob).post("/api/v1/instances/", {"team": acme.pk} | GOOD | {"gpu_count": 9})
    assert response.json()["gpu_count"] == ["At most 8 fit on one host of H100-80GB; you asked for 9."]


def test_malformed_json_is_a_400(api, bob, fleet):
    response = api(bob).post("/api/v1/instances/", "{not json", content_type="application/json")
    assert response.status_code == 400


def test_oversized_body_is_refused(api, bob, acme, fleet):
    body = {"team": acme.pk} | GOOD | {"name": "x" * 300_000}
    response = api(bob).post("/api/v1/instances/", body, format="json")
    assert response.status_code in (400, 413)
    assert not Instance.objects.exists()


def test_host_names_with_control_characters_are_refused(api, ops, fleet):
    response = api(ops).post("/api/v1/hosts/", {"name": "evil\r\nhost", "region": "us-east-1"})
    assert response.status_code == 400
    assert "name" in response.json()


def test_unknown_region_for_a_host_is_named(api, ops, fleet):
    response = api(ops).post("/api/v1/hosts/", {"name": "new-host", "region": "nowhere"})
    assert "region" in response.json()
