"""Host tokens expire; rotating one gives a new token while the old keeps working for a
grace period, so telemetry flows throughout."""

from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone
from telemetry_wire import BOOT, new_boot, record, samples

from agent.spool import Spool
from agent.uplink import HostLink
from audit.models import AuditEvent
from monitoring import services
from monitoring.models import HostToken, Sample


@pytest.fixture
def h100a_token(ops, fleet):
    return services.create_host_token(actor=ops, host=fleet["hosts"]["h100-a"], name="rack 4")


@pytest.mark.django_db(transaction=True)
async def test_telemetry_flows_across_a_rotation(agent, ops, h100a_token):
    old, old_raw = h100a_token
    async with agent(old_raw) as before:
        await before.hello()
        await before.send(samples([record(1, gpu_util=10)]))
        assert (await before.recv())["seq"] == 1
        _, new_raw = await sync_to_async(services.rotate_host_token)(actor=ops, token=old)
        await before.send(samples([record(2, gpu_util=20)]))  # the old connection goes on
        assert (await before.recv())["seq"] == 2
        async with agent(new_raw) as after:
            await after.hello(boot_id=(boot := new_boot()))
            await after.send(samples([record(1, gpu_util=30)], boot_id=boot))
            assert (await after.recv())["seq"] == 1
    assert await Sample.objects.acount() == 3
    assert BOOT != boot


def test_both_work_during_the_grace_then_only_the_new(ops, h100a_token, settings):
    settings.HOST_TOKEN_ROTATION_GRACE_S = 3600
    old, old_raw = h100a_token
    new, new_raw = services.rotate_host_token(actor=ops, token=old)
    assert services.authenticate_agent(old_raw).pk == old.pk
    assert services.authenticate_agent(new_raw).pk == new.pk
    old.refresh_from_db()
    assert timedelta(minutes=59) < old.expires_at - timezone.now() <= timedelta(hours=1)
    assert old.replaced_by_id == new.pk and old.status == "rotating"
    HostToken.objects.filter(pk=old.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert services.authenticate_agent(old_raw) is None
    assert services.authenticate_agent(new_raw).pk == new.pk


def test_an_expired_token_is_refused(ops, h100a_token):
    token, raw = h100a_token
    assert timedelta(days=364) < token.expires_at - timezone.now() <= timedelta(days=365)
    HostToken.objects.filter(pk=token.pk).update(expires_at=timezone.now())
    assert services.authenticate_agent(raw) is None


def test_rotation_is_audited_and_answers_the_new_token(api, ops, h100a_token):
    old, _ = h100a_token
    response = api(ops).post(f"/api/v1/host-tokens/{old.pk}/rotate/")
    assert response.status_code == 201
    body = response.json()
    assert body["token"].startswith("gph_") and body["host"] == "h100-a" and body["name"] == "rack 4"
    event = AuditEvent.objects.get(action="host_token.rotate")
    assert event.details["new"] == body["prefix"] and event.details["old"] == old.prefix


def test_a_token_rotates_once(api, ops, h100a_token):
    old, _ = h100a_token
    api(ops).post(f"/api/v1/host-tokens/{old.pk}/rotate/")
    again = api(ops).post(f"/api/v1/host-tokens/{old.pk}/rotate/")
    assert again.status_code == 409
    assert "already rotated" in again.json()["detail"]


def test_a_revoked_token_does_not_rotate(api, ops, h100a_token):
    old, _ = h100a_token
    services.revoke_host_token(actor=ops, token=old)
    assert api(ops).post(f"/api/v1/host-tokens/{old.pk}/rotate/").status_code == 409


def test_only_operators_rotate(api, alice, h100a_token):
    old, _ = h100a_token
    assert api(alice).post(f"/api/v1/host-tokens/{old.pk}/rotate/").status_code == 403


def test_the_page_rotates_and_shows_expiry(client, ops, h100a_token):
    old, _ = h100a_token
    client.force_login(ops)
    response = client.post(f"/hosts/{old.host_id}/tokens/", {"rotate": old.pk}, follow=True)
    page = response.content.decode()
    assert "keeps working until" in page and "rotating" in page
    assert HostToken.objects.filter(host=old.host).count() == 2


def test_the_agent_rereads_its_token_file_before_connecting(tmp_path):
    path = tmp_path / "token"
    path.write_text("gph_old\n")
    link = HostLink(server="ws://127.0.0.1:1/ws/agent/", host="h", token="gph_old", gpus=[], backend="replay",
                    spool=Spool(tmp_path / "spool"), token_file=str(path))
    assert link._current_token() == "gph_old"
    path.write_text("gph_new\n")
    assert link._current_token() == "gph_new"
    path.unlink()
    assert link._current_token() == "gph_new"  # an unreadable file keeps the token in use


@pytest.mark.django_db(transaction=True)
async def test_a_connection_ends_when_its_token_expires(agent, ops, h100a_token):
    old, old_raw = h100a_token
    await HostToken.objects.filter(pk=old.pk).aupdate(expires_at=timezone.now() + timedelta(seconds=1))
    async with agent(old_raw) as a:
        await a.hello()
        error = await a.recv(timeout=5)
        assert error == {"type": "error", "code": "token_expired", "message": error["message"]}
        assert await a.closed() == 4440  # the agent reconnects, rereading its token file
