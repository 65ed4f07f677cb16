import pytest

from instances.models import Instance


@pytest.fixture
def logged_in(client):
    def _as(user):
        client.force_login(user)
        return client

    return _as


def test_login_page_logs_bob_in(client, bob):
    response = client.post("/login/", {"username": "bob", "password": "demo-password"}, follow=True)
    assert response.context["user"].username == "bob"


def test_wrong_password_shows_an_error(client, bob):
    response = client.post("/login/", {"username": "bob", "password": "nope"})
    assert response.status_code == 200
    assert b"Please enter a correct username and password" in response.content


def test_pages_need_a_login(client, fleet):
    assert client.get("/instances/").status_code == 302


def test_bob_sees_acme_instances_only(logged_in, bob, acme_instance, globex_instance):
    page = logged_in(bob).get("/instances/").content.decode()
    assert "acme-train" in page and "globex-train" not in page


def test_charlie_gets_404_for_an_acme_instance_page(logged_in, charlie, acme_instance):
    assert logged_in(charlie).get(f"/instances/{acme_instance.pk}/").status_code == 404


def test_charlie_cannot_stop_acme_from_a_page(logged_in, charlie, acme_instance):
    assert logged_in(charlie).post(f"/instances/{acme_instance.pk}/stop/").status_code == 404
    acme_instance.refresh_from_db()
    assert acme_instance.state == "running"


def test_bob_launches_from_the_form(logged_in, bob, acme, fleet):
    body = {"team": acme.pk, "name": "from-form", "gpu_model": "H100-80GB", "gpu_count": 2, "pricing_model": "spot"}
    response = logged_in(bob).post("/instances/new/", body)
    instance = Instance.objects.get(name="from-form")
    assert response.status_code == 302 and response.url == f"/instances/{instance.pk}/"


def test_the_form_names_a_bad_field(logged_in, bob, acme, fleet):
    body = {"team": acme.pk, "name": "bad\tname", "gpu_model": "H100-80GB", "gpu_count": 0, "pricing_model": "spot"}
    response = logged_in(bob).post("/instances/new/", body)
    assert response.status_code == 400
    assert set(response.context["form"].errors) == {"name", "gpu_count"}
    assert not Instance.objects.exists()


def test_the_form_shows_no_capacity(logged_in, bob, acme, fleet):
    body = {"team": acme.pk, "name": "huge", "gpu_model": "H200-141GB", "gpu_count": 2, "pricing_model": "spot"}
    response = logged_in(bob).post("/instances/new/", body)
    assert b"No capacity" in response.content


def test_bob_stops_from_the_page(logged_in, bob, acme_instance, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        logged_in(bob).post(f"/instances/{acme_instance.pk}/stop/")
    acme_instance.refresh_from_db()
    assert acme_instance.state == "stopped"


def test_audrey_sees_no_launch_form(logged_in, audrey, fleet):
    assert logged_in(audrey).get("/instances/new/").status_code == 403


def test_hosts_page_is_for_operators(logged_in, bob, ops, fleet):
    assert logged_in(bob).get("/hosts/").status_code == 403
    assert b"h100-a" in logged_in(ops).get("/hosts/").content


def test_logout_needs_post(logged_in, bob):
    client = logged_in(bob)
    assert client.get("/logout/").status_code == 405
    client.post("/logout/")
    assert client.get("/instances/").status_code == 302


def test_a_pending_preemption_notice_shows_on_the_instance_page(logged_in, bob, launch, acme, ops):
    from instances.lifecycle import mark_running
    from instances.preemption import issue_preemption_notice

    spot = mark_running(instance=launch(bob, acme, name="cheap", pricing="spot"))
    issue_preemption_notice(actor=ops, instance=spot, reason="capacity needed")
    page = logged_in(bob).get(f"/instances/{spot.pk}/").content.decode()
    assert "will be preempted at" in page and "capacity needed" in page


def test_the_instance_page_shows_price_spend_and_a_ticker(logged_in, bob, acme_instance):
    page = logged_in(bob).get(f"/instances/{acme_instance.pk}/").content.decode()
    assert 'id="price-per-hour">2.00 USD/h' in page  # 2 × H100 at the fleet's 1.00
    assert 'id="cost-ticker"' in page and 'data-rate="2.00' in page
    assert "instances/cost.js" in page


def test_the_list_shows_price_and_spend_per_instance(logged_in, bob, acme_instance):
    page = logged_in(bob).get("/instances/").content.decode()
    assert "Price/h (USD)" in page and '<td class="num mono">2.00</td>' in page


def test_a_stuck_stop_is_flagged_and_operators_can_force_it(logged_in, bob, ops, acme, launch):
    from datetime import timedelta

    from django.utils import timezone

    from instances.lifecycle import mark_running, stop_instance

    hour_ago = timezone.now() - timedelta(hours=1)
    acme_instance = mark_running(instance=launch(bob, acme, at=hour_ago), at=hour_ago)
    stop_instance(actor=bob, instance=acme_instance, at=timezone.now() - timedelta(minutes=11), finish=False)
    assert "Stuck in <strong>stopping</strong>" in logged_in(bob).get(f"/instances/{acme_instance.pk}/").content.decode()
    assert 'id="force-stop"' not in logged_in(bob).get(f"/instances/{acme_instance.pk}/").content.decode()
    client = logged_in(ops)
    assert 'id="force-stop"' in client.get(f"/instances/{acme_instance.pk}/").content.decode()
    client.post(f"/instances/{acme_instance.pk}/force-stop/")
    acme_instance.refresh_from_db()
    assert acme_instance.state == "stopped"
