"""Find every URL that accepts POST, PUT, PATCH or DELETE, by walking the URL
configuration: DRF viewsets (their action maps), class-based views (their handlers) and
function views (``require_http_methods`` or a body that reads ``request.POST``)."""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass

from django.urls import URLPattern, URLResolver, get_resolver

MUTATING = ("POST", "PUT", "PATCH", "DELETE")
# Every mutating route is walked; nothing is exempt.
SKIPPED_NAMESPACES: dict[str, str] = {}


@dataclass(frozen=True)
class Endpoint:
    method: str
    route: str  # e.g. "/api/v1/hosts/<pk>/"
    name: str | None

    @property
    def key(self) -> str:
        return f"{self.method} {self.route}"


def _readable(route: str) -> str:
    route = route.replace("^", "").replace("$", "")
    route = re.sub(r"\(\?P<(\w+)>[^)]*\)", r"<\1>", route)
    route = re.sub(r"<\w+:(\w+)>", r"<\1>", route)
    return "/" + route


def _function_methods(view) -> set[str]:
    found: set[str] = set()
    reads_post = False
    fn = view
    while fn is not None:
        try:
            closure = inspect.getclosurevars(fn).nonlocals
        except TypeError:
            closure = {}
        methods = closure.get("request_method_list")
        if methods:
            found |= {m.upper() for m in methods}
        try:
            source = inspect.getsource(fn)
        except (OSError, TypeError):
            source = ""
        reads_post = reads_post or _reads_post(source) or _helpers_read_post(fn, source)
        fn = getattr(fn, "__wrapped__", None)
    if found:
        return found & set(MUTATING)
    return {"POST"} if reads_post else set()


def _reads_post(source: str) -> bool:
    return bool(re.search(r"request\.(POST|method\s*==\s*['\"]POST)", source))


def _helpers_read_post(fn, source: str) -> bool:
    """A view that hands its request to a helper of its module (``_form(request, …)``)
    handles POST if that helper reads it."""
    module = getattr(fn, "__globals__", {})
    for name in set(re.findall(r"\b(\w+)\(\s*request\b", source)):
        helper = module.get(name)
        if inspect.isfunction(helper) and helper.__module__ == getattr(fn, "__module__", None):
            try:
                if _reads_post(inspect.getsource(helper)):
                    return True
            except (OSError, TypeError):
                continue
    return False


def methods_of(callback) -> set[str]:
    actions = getattr(callback, "actions", None)
    cls = getattr(callback, "cls", None) or getattr(callback, "view_class", None)
    if actions is not None:
        allowed = {m.upper() for m in getattr(cls, "http_method_names", [])}
        return {m.upper() for m in actions} & allowed & set(MUTATING)
    if cls is not None:
        return {
            m for m in MUTATING if m.lower() in cls.http_method_names and hasattr(cls, m.lower())
        }
    return _function_methods(callback)


def endpoints() -> list[Endpoint]:
    found: dict[str, Endpoint] = {}

    def walk(resolver: URLResolver, prefix: str) -> None:
        for entry in resolver.url_patterns:
            if isinstance(entry, URLResolver):
                if entry.namespace in SKIPPED_NAMESPACES:
                    continue
                walk(entry, prefix + str(entry.pattern))
            elif isinstance(entry, URLPattern):
                route = prefix + str(entry.pattern)
                if "format" in entry.pattern.regex.groupindex:
                    continue  # DRF's ".json" twins of the same view
                for method in methods_of(entry.callback):
                    endpoint = Endpoint(method, _readable(route), entry.name)
                    found.setdefault(endpoint.key, endpoint)

    walk(get_resolver(), "")
    return sorted(found.values(), key=lambda e: e.key)
