"""Times and prices shared by the billing tests (imported as ``billing_support``)."""

from datetime import UTC, datetime
from decimal import Decimal

CATALOG_START = datetime(2026, 1, 1, tzinfo=UTC)
NOV = datetime(2026, 11, 1, tzinfo=UTC)
DEC = datetime(2026, 12, 1, tzinfo=UTC)
ON_DEMAND = {
    "H100-80GB": Decimal("2.00"),
    "A100-80GB": Decimal("1.00"),
    "H200-141GB": Decimal("3.60"),
    "A100-80GB:mig:1g.10gb": Decimal("0.18"),
}
THREE_YEAR = {"H100-80GB": Decimal("0.80"), "H200-141GB": Decimal("1.44")}
SPOT = {"H100-80GB": Decimal("0.72"), "A100-80GB": Decimal("0.36"), "H200-141GB": Decimal("1.20")}


def at(day: int, hour: int = 0, minute: int = 0, second: int = 0, month: int = 11) -> datetime:
    return datetime(2026, month, day, hour, minute, second, tzinfo=UTC)


def months_ahead(n: int) -> str:
    """The month ``n`` months after this one (real time), as YYYY-MM: a month a budget may
    still be set for whenever the suite runs."""
    from django.utils import timezone

    today = timezone.now()
    year, month = divmod(today.year * 12 + today.month - 1 + n, 12)
    return f"{year:04d}-{month + 1:02d}"
