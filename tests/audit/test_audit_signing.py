from audit import signing


def test_a_head_signed_with_the_private_key_verifies_with_the_public_key():
    private = signing.load_private(signing.new_private_pem())
    message = signing.head_message(7, "ab" * 32, "cd" * 32, "2026-12-03T08:00:00.000000+00:00")
    signature = signing.sign(private, message)
    assert signing.verify(signing.public_pem(private), message, signature)


def test_another_key_or_another_head_fails():
    private = signing.load_private(signing.new_private_pem())
    other = signing.load_private(signing.new_private_pem())
    message = signing.head_message(7, "ab" * 32, "cd" * 32, "t")
    signature = signing.sign(private, message)
    assert not signing.verify(signing.public_pem(other), message, signature)
    assert not signing.verify(
        signing.public_pem(private), signing.head_message(8, "ab" * 32, "cd" * 32, "t"), signature
    )
    assert not signing.verify(signing.public_pem(private), message, "not base64!")


def test_the_fingerprint_names_the_public_key():
    private = signing.load_private(signing.new_private_pem())
    pem = signing.public_pem(private)
    assert signing.fingerprint(pem) == signing.fingerprint(private.public_key())
    assert len(signing.fingerprint(pem)) == 64
