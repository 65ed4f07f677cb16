"""What apps above this one add to a launch: form fields and their checks, and a context
the launch runs in. The network app adds the subnet and security groups this way
(``NetworkConfig.ready``), so the launch page and API offer them while instances never
import the apps that build on them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from typing import Protocol


class LaunchOption(Protocol):
    def add_fields(self, form, user) -> None:
        """Add this option's fields to the launch form, with the choices ``user`` has."""

    def clean(self, form, data: dict) -> None:
        """Check the cleaned choices against each other (``form.add_error``)."""

    def around(self, *, actor, team, data: dict) -> AbstractContextManager:
        """The context a launch with these choices runs in; it may refuse them."""


_options: list[LaunchOption] = []


def register(option: LaunchOption) -> None:
    if all(type(known) is not type(option) for known in _options):
        _options.append(option)


def add_fields(form, user) -> None:
    for option in _options:
        option.add_fields(form, user)


def clean(form, data: dict) -> None:
    for option in _options:
        option.clean(form, data)


@contextmanager
def launching(*, actor, team, data: dict) -> Iterator[None]:
    with ExitStack() as stack:
        for option in _options:
            stack.enter_context(option.around(actor=actor, team=team, data=data))
        yield
