"""List endpoints answer in a fixed number of queries, however many rows."""

import pytest


@pytest.fixture
def many_instances(launch, bob, acme):
    from instances.lifecycle import mark_running

    for n, pricing in enumerate(["on_demand", "spot", "reserved"] * 2):
        mark_running(instance=launch(bob, acme, name=f"job-{n}", count=2, pricing=pricing))


def count_queries(django_assert_max_num_queries, client, url, limit):
    with django_assert_max_num_queries(limit):
        response = client.get(url)
    assert response.status_code == 200
    return response


def test_instance_list(api, bob, many_instances, django_assert_max_num_queries):
    # 11 today (about half for the prices and costs, billing.rates, one of them when each
    # instance's run began, where its cost so far counts from): the same for any number of rows
    response = count_queries(django_assert_max_num_queries, api(bob), "/api/v1/instances/", 11)
    assert response.json()["count"] == 6
    assert all(row["price_per_hour"] is not None for row in response.json()["results"])


def test_gpu_list(api, ops, fleet, django_assert_max_num_queries):
    count_queries(django_assert_max_num_queries, api(ops), "/api/v1/gpus/", 5)


def test_host_list(api, ops, fleet, django_assert_max_num_queries):
    count_queries(django_assert_max_num_queries, api(ops), "/api/v1/hosts/", 4)


def test_member_list(api, alice, bob, django_assert_max_num_queries):
    count_queries(django_assert_max_num_queries, api(alice), "/api/v1/members/", 4)


def test_instance_page(client, bob, many_instances, django_assert_max_num_queries):
    client.force_login(bob)
    with django_assert_max_num_queries(13):  # prices and costs of the page included, run starts too
        assert client.get("/instances/").status_code == 200
