import pytest
from django.core.exceptions import ValidationError

from instances.images import parse_reference


@pytest.mark.parametrize(
    ("text", "registry", "repository", "tag", "digest"),
    [
        ("nvcr.io/nvidia/pytorch:24.10-py3", "nvcr.io", "nvidia/pytorch", "24.10-py3", ""),
        ("registry.acme.example:5000/ml/llm-train", "registry.acme.example:5000", "ml/llm-train", "", ""),
        ("localhost:5000/a__b/c-d.e:v1", "localhost:5000", "a__b/c-d.e", "v1", ""),
        ("localhost/img", "localhost", "img", "", ""),
        ("ghcr.io/org/img@sha256:" + "a" * 64, "ghcr.io", "org/img", "", "sha256:" + "a" * 64),
        ("ghcr.io/org/img:1.0@sha512:" + "0" * 128, "ghcr.io", "org/img", "1.0", "sha512:" + "0" * 128),
        ("[fd00::1]:5000/img:x", "[fd00::1]:5000", "img", "x", ""),
    ],
)
def test_it_parses_good_references(text, registry, repository, tag, digest):
    ref = parse_reference(text)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == (registry, repository, tag, digest)
    assert str(ref) == text


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "Give an image reference"),
        ("pytorch:24.10", "Name the registry"),
        ("pytorch/pytorch:2.5", "docker.io/pytorch/pytorch:2.5"),
        ("https://nvcr.io/nvidia/pytorch:1", "without a scheme"),
        ("nvcr.io/NVIDIA/pytorch:1", "is not a repository"),
        ("nvcr.io/nvidia//pytorch", "is not a repository"),
        ("nvcr.io/nvidia/pytorch:-bad", "A tag is"),
        ("nvcr.io/nvidia/pytorch:" + "t" * 129, "A tag is"),
        ("nvcr.io/nvidia/pytorch@sha256:abc", "A digest is"),
        ("nvcr.io/nvidia/pytorch@sha256:" + "a" * 63, "64 lowercase"),
        ("nvcr.io/nvidia/pytorch@sha256:" + "A" * 64, "64 lowercase"),
        ("nvcr.io/nvidia/pytorch@md5:" + "a" * 32, "Unknown digest algorithm"),
        ("nvcr.io/nvidia/py torch", "no spaces"),
        ("-bad.host/img", "is not a registry host"),
        ("nvcr.io/" + "a" * 256, "at most 255"),
    ],
)
def test_it_says_what_is_wrong_with_a_bad_reference(text, says):
    with pytest.raises(ValidationError) as caught:
        parse_reference(text)
    assert says in caught.value.messages[0]
