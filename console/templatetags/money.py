"""How money and prices read on pages: money with 2 decimals and thousands separators
(1,474.59), hourly prices with what they need, at least 2 decimals (1.794, 2.99)."""

from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

from django import template
from django.conf import settings

register = template.Library()


def _decimal(value) -> Decimal | None:
    if value is None or value == "":
        return None
    try:
        return value if isinstance(value, Decimal) else Decimal(str(value))
    except (InvalidOperation, ValueError):
        return None


@register.filter
def money(value) -> str:
    """1474.5 -> '1,474.50'; None -> '—'."""
    amount = _decimal(value)
    if amount is None:
        return "—"
    return f"{amount.quantize(Decimal('0.01'), rounding=ROUND_HALF_UP):,}"


@register.filter
def rate(value) -> str:
    """An hourly price: its own decimals (up to 6), at least 2: 1.794000 -> '1.794'."""
    price = _decimal(value)
    if price is None:
        return "—"
    text = f"{price.normalize():,f}"
    whole, _, frac = text.partition(".")
    return f"{whole}.{frac.ljust(2, '0')}"


@register.simple_tag
def currency_code() -> str:
    """This deployment's currency (``BILLING_CURRENCY``, checked when settings load), for
    pages whose view has no billing context to name it."""
    return settings.BILLING_CURRENCY
