"""Domain errors every app may raise and the API answers the same way."""


class Conflict(Exception):
    """A request the current state of its object does not allow (answers 409 with ``code``)."""

    code = "conflict"
