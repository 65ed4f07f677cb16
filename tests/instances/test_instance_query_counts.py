"""List endpoints answer in a fixed number of queries, however many rows."""

import pytest


@pytest.fixture
def many_instances(launch, bob, acme):
    for n in range(6):
        launch(bob, acme, name=f"job-{n}", count=2)


def count_queries(django_assert_max_num_queries, client, url, limit):
    with django_assert_max_num_queries(limit):
        response = client.get(url)
    assert response.status_code == 200
    return response


def test_instance_list(api, bob, many_instances, django_assert_max_num_queries):
    response = count_queries(django_assert_max_num_queries, api(bob), "/api/v1/instances/", 6)
    assert response.json()["count"] == 6


def test_gpu_list(api, ops, fleet, django_assert_max_num_queries):
    count_queries(django_assert_max_num_queries, api(ops), "/api/v1/gpus/", 5)


def test_host_list(api, ops, fleet, django_assert_max_num_queries):
    count_queries(django_assert_max_num_queries, api(ops), "/api/v1/hosts/", 4)


def test_member_list(api, alice, bob, django_assert_max_num_queries):
    count_queries(django_assert_max_num_queries, api(alice), "/api/v1/members/", 4)


def test_instance_page(client, bob, many_instances, django_assert_max_num_queries):
    client.force_login(bob)
    with django_assert_max_num_queries(10):
        assert client.get("/instances/").status_code == 200
