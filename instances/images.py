"""The image catalog: what an instance boots. Operators keep the public images; a team
brings its own by OCI registry reference, private to it. Every change is audited.

A launch names an image or gets its GPU model's default; ``image_for_launch`` is the
one rule that says which images a launch may use."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from audit.recording import record_event

from .models import GpuModel, Image, ImageVisibility

# The grammar of github.com/distribution/reference (the one Docker, containerd and the
# OCI distribution spec follow), with the registry required: a console that pulls for a
# team must know where from, not guess Docker Hub.
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[_.]|__|-+)[a-z0-9]+)*"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"(?P<algorithm>[a-z0-9]+(?:[+._-][a-z0-9]+)*):(?P<hex>[0-9a-fA-F]{32,})"
_REFERENCE = re.compile(
    rf"^(?P<registry>{_DOMAIN})/(?P<repository>{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)"
    rf"(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?$"
)
# Registered digest algorithms of the OCI image spec and the length of their hex.
_DIGEST_HEX = {"sha256": 64, "sha512": 128}
MAX_NAME = 255  # registry + repository, as distribution/reference limits it


@dataclass(frozen=True)
class Reference:
    registry: str
    repository: str
    tag: str
    digest: str

    def __str__(self) -> str:
        return f"{self.registry}/{self.repository}" + (f":{self.tag}" if self.tag else "") + (
            f"@{self.digest}" if self.digest else "")


def parse_reference(text) -> Reference:
    """``registry/repository[:tag][@sha256:digest]`` or a ValidationError saying what is wrong."""
    if not isinstance(text, str) or not text.strip():
        raise ValidationError("Give an image reference: registry/repository[:tag][@sha256:digest].")
    text = text.strip()
    match = _REFERENCE.match(text)
    if match is None:
        raise ValidationError(_why_not(text))
    if not _is_registry(match["registry"]):
        raise ValidationError(f"Name the registry: {match['registry']!r} reads as a Docker Hub namespace; write "
                              f"docker.io/{text} if that is where it lives.")
    name = f"{match['registry']}/{match['repository']}"
    if len(name) > MAX_NAME:
        raise ValidationError(f"The registry and repository are at most {MAX_NAME} characters.")
    digest = match["digest"] or ""
    if digest:
        want = _DIGEST_HEX.get(match["algorithm"])
        if want is None:
            raise ValidationError(f"Unknown digest algorithm {match['algorithm']!r}: use sha256 or sha512.")
        if len(match["hex"]) != want or match["hex"] != match["hex"].lower():
            raise ValidationError(f"A {match['algorithm']} digest is {want} lowercase hexadecimal characters.")
    return Reference(match["registry"], match["repository"], match["tag"] or "", digest)


def _is_registry(host: str) -> bool:
    # distribution/reference's rule: the first component is a registry only if it has a
    # dot or a port, or is localhost.
    return "." in host or ":" in host or host == "localhost" or host.startswith("[")


def _why_not(text: str) -> str:
    if any(c.isspace() for c in text):
        return "An image reference has no spaces."
    if "://" in text:
        return "Give the reference without a scheme (no https://): registry/repository[:tag]."
    head, _, rest = text.partition("/")
    if not rest:
        return "Name the registry: registry/repository[:tag], e.g. nvcr.io/nvidia/pytorch:24.10-py3."
    if not re.fullmatch(_DOMAIN, head):
        return f"{head!r} is not a registry host (name or address, with an optional :port)."
    repository = re.split(r"[:@]", rest, maxsplit=1)[0]
    if not re.fullmatch(rf"{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*", repository):
        return (f"{repository!r} is not a repository: lowercase letters and digits, separated by "
                "'.', '_', '__', '-' or '/'.")
    if "@" in rest and not re.search(rf"@{_DIGEST}$", rest):
        return "A digest is algorithm:hex, e.g. @sha256: and 64 hexadecimal characters."
    return "A tag is letters, digits, '_', '.' or '-' (at most 128, not starting with '.' or '-')."


# --- which image a launch boots ----------------------------------------------------


def default_image(gpu_model: GpuModel) -> Image | None:
    """The public image a launch of ``gpu_model`` boots when it names none."""
    return (Image.objects.launchable().filter(visibility=ImageVisibility.PUBLIC, default_for=gpu_model,
                                              gpu_models=gpu_model).order_by("-created_at", "-id").first())


def image_for_launch(*, image: Image | None, team, gpu_model: GpuModel) -> Image | None:
    """The image a launch of ``gpu_model`` for ``team`` boots, or a ValidationError on
    ``image`` saying why the named one cannot be used."""
    if image is None:
        return default_image(gpu_model)
    image = Image.objects.filter(pk=image.pk).first()
    team_id = getattr(team, "pk", team)
    if image is None or (image.visibility == ImageVisibility.PRIVATE and image.team_id != team_id):
        raise ValidationError({"image": "No such image, or it is private to another team."})
    if image.retired:
        raise ValidationError({"image": f"Image {image.name} was retired on {image.retired_at:%Y-%m-%d}; "
                                        "choose another."})
    if not image.gpu_models.filter(pk=gpu_model.pk).exists():
        supported = ", ".join(image.gpu_models.values_list("name", flat=True)) or "none"
        raise ValidationError({"image": f"Image {image.name} does not support {gpu_model.name} "
                                        f"(it supports: {supported})."})
    return image


# --- verbs -------------------------------------------------------------------------


def _details(image: Image) -> dict:
    return {"name": image.name, "reference": image.reference, "visibility": image.visibility,
            "framework": image.framework, "framework_version": image.framework_version,
            "cuda_version": image.cuda_version, "size_bytes": image.size_bytes,
            "gpu_models": sorted(m.name for m in image.gpu_models.all())}


@transaction.atomic
def create_image(*, actor, name: str, reference: str, gpu_models, team=None, framework: str = "",
                 framework_version: str = "", cuda_version: str = "", size_bytes: int | None = None,
                 default_for=(), at: datetime | None = None) -> Image:
    """A public image (``team`` None, operators) or a team's private one."""
    reference = str(parse_reference(reference))
    gpu_models = list(gpu_models)
    if not gpu_models:
        raise ValidationError({"gpu_models": "Name at least one GPU model the image supports."})
    if size_bytes is not None and size_bytes < 0:
        raise ValidationError({"size_bytes": "The size is a number of bytes, not negative."})
    default_for = list(default_for)
    if default_for and team is not None:
        raise ValidationError({"default_for": "Only a public image can be a GPU model's default."})
    if not {m.pk for m in default_for} <= {m.pk for m in gpu_models}:
        raise ValidationError({"default_for": "An image is a default only for GPU models it supports."})
    if Image.objects.filter(name=name, team=team, retired_at__isnull=True).exists():
        raise ValidationError({"name": f"An image named {name} is already in the catalog."})
    image = Image(name=name, reference=reference, team=team, framework=framework,
                  framework_version=framework_version, cuda_version=cuda_version, size_bytes=size_bytes,
                  visibility=ImageVisibility.PRIVATE if team is not None else ImageVisibility.PUBLIC,
                  created_at=at or timezone.now(), created_by=actor if getattr(actor, "is_authenticated", False) else None)
    image.full_clean(exclude=["gpu_models", "default_for"])
    image.save()
    image.gpu_models.set(gpu_models)
    if default_for:
        _make_default(image, default_for)
    record_event(actor=actor, action="image.create", target=image, team=team,
                 details={**_details(image), "default_for": sorted(m.name for m in default_for)})
    return image


def _make_default(image: Image, gpu_models) -> None:
    for model in gpu_models:  # one default per GPU model: the newest one set wins
        for other in Image.objects.filter(default_for=model).exclude(pk=image.pk):
            other.default_for.remove(model)
    image.default_for.add(*gpu_models)


@transaction.atomic
def set_default(*, actor, image: Image, gpu_model: GpuModel) -> Image:
    """Operators: ``image`` is what launches of ``gpu_model`` boot when they name none."""
    image = Image.objects.select_for_update().get(pk=image.pk)
    if image.visibility != ImageVisibility.PUBLIC or image.retired:
        raise ValidationError({"image": "Only a public image in service can be a GPU model's default."})
    if not image.gpu_models.filter(pk=gpu_model.pk).exists():
        raise ValidationError({"gpu_model": f"Image {image.name} does not support {gpu_model.name}."})
    before = default_image(gpu_model)
    _make_default(image, [gpu_model])
    record_event(actor=actor, action="image.default", target=image,
                 details={"gpu_model": gpu_model.name, "before": before.name if before else None})
    return image


@transaction.atomic
def retire_image(*, actor, image: Image, at: datetime | None = None) -> Image:
    """No new launch may boot it; instances already running keep it."""
    image = Image.objects.select_for_update().get(pk=image.pk)
    if image.retired:
        raise ValidationError({"image": f"Image {image.name} is already retired."})
    image.retired_at = at or timezone.now()
    image.save(update_fields=["retired_at"])
    dropped = sorted(image.default_for.values_list("name", flat=True))
    image.default_for.clear()
    running = image.instances.filter(state__in=("pending", "running", "stopping")).count()
    record_event(actor=actor, action="image.retire", target=image, team=image.team_id,
                 details={"name": image.name, "reference": image.reference, "default_for_dropped": dropped,
                          "instances_running": running})
    return image
