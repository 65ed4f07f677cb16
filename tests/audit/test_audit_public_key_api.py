from audit import checkpoints, signing
from audit.models import Checkpoint


def test_anyone_can_read_the_public_key_and_its_fingerprint(client, events, settings):
    events(1)
    body = client.get("/api/v1/audit/public-key/").json()
    expected = signing.public_pem(signing.load_private(settings.AUDIT_SIGNING_KEY.encode()))
    assert body["algorithm"] == "Ed25519" and body["public_key_pem"] == expected
    assert body["fingerprint"] == signing.fingerprint(expected)


def test_old_keys_stay_listed_with_their_validity(client, events, settings):
    events(1)
    checkpoints.write_checkpoint()
    old = client.get("/api/v1/audit/public-key/").json()["fingerprint"]
    settings.AUDIT_SIGNING_KEY = signing.new_private_pem().decode()
    body = client.get("/api/v1/audit/public-key/").json()
    listed = {k["fingerprint"]: k for k in body["keys"]}
    assert body["fingerprint"] != old and listed[old]["valid_until"] is not None
    assert listed[body["fingerprint"]]["valid_until"] is None


def test_the_private_key_never_appears(client, events, settings):
    events(1)
    text = client.get("/api/v1/audit/public-key/").content.decode()
    assert "PRIVATE" not in text and settings.AUDIT_SIGNING_KEY.splitlines()[1] not in text
    assert Checkpoint.objects.count() == 0
