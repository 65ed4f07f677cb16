"""Billing: the price catalog, spot prices, reservations, metered usage, rated charges,
invoices, budgets and spot preemption notices. Money is Decimal, time is UTC, and
every period is [start, end). Rows change only through billing's verbs (price_changes, reservations,
meter_runs, invoices, budgets)."""

from decimal import Decimal

from django.conf import settings
from django.db import models
from django.utils import timezone

from console.tenancy import TeamScopedQuerySet

from .pricing import from_cents, seconds

MONEY = {"max_digits": 16, "decimal_places": 2}
RATE = {"max_digits": 14, "decimal_places": 6}


def currency() -> str:
    return getattr(settings, "BILLING_CURRENCY", "USD")


class PriceKind(models.TextChoices):
    ON_DEMAND = "on_demand", "On-demand"
    RESERVED_3Y = "reserved_3y", "Reserved, 3-year"
    # What low-priority jobs in idle capacity pay per GPU-hour (jobs/), set by operators.
    IDLE = "idle", "Idle capacity"


class Price(models.Model):
    """A catalog price per SKU-hour (a whole GPU of a model, or one MIG/vGPU slice),
    in effect over [effective_from, effective_until). Periods of a (sku, kind) never
    overlap, and a period never starts before it was set."""

    sku = models.CharField(max_length=100, db_index=True)
    kind = models.CharField(max_length=16, choices=PriceKind.choices)
    hourly = models.DecimalField(**RATE)
    effective_from = models.DateTimeField()
    effective_until = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey("auth.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["sku", "kind", "effective_from"]
        constraints = [models.UniqueConstraint(fields=["sku", "kind", "effective_from"], name="one_price_per_start")]

    def __str__(self) -> str:
        return f"{self.sku} {self.kind} {self.hourly}/h from {self.effective_from:%Y-%m-%d %H:%M}"


class SpotSource(models.TextChoices):
    MARKET = "market", "Simulated market (demo)"
    OPERATOR = "operator", "Operator"
    IMPORT = "import", "Imported feed"


class SpotPrice(models.Model):
    """The spot price of a SKU-hour from ``time`` until the next row of that SKU."""

    sku = models.CharField(max_length=100)
    hourly = models.DecimalField(**RATE)
    time = models.DateTimeField()
    source = models.CharField(max_length=16, choices=SpotSource.choices, default=SpotSource.MARKET)
    set_by = models.ForeignKey("auth.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        ordering = ["sku", "time"]
        constraints = [models.UniqueConstraint(fields=["sku", "time"], name="one_spot_price_per_instant")]

    def __str__(self) -> str:
        return f"{self.sku} spot {self.hourly}/h at {self.time:%Y-%m-%d %H:%M}"


class Term(models.TextChoices):
    ONE_YEAR = "1y", "1 year"
    THREE_YEARS = "3y", "3 years"


class Reservation(models.Model):
    """A commitment to N whole GPUs of a model over [start, end), billed every second of
    the term at ``hourly`` per GPU, fixed when it was bought."""

    team = models.ForeignKey("console.Team", on_delete=models.PROTECT, related_name="reservations")
    gpu_model = models.ForeignKey("instances.GpuModel", on_delete=models.PROTECT, related_name="reservations")
    gpu_count = models.PositiveIntegerField()
    term = models.CharField(max_length=4, choices=Term.choices)
    start = models.DateTimeField()
    end = models.DateTimeField()
    hourly = models.DecimalField(**RATE)
    created_by = models.ForeignKey("auth.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    objects = TeamScopedQuerySet.as_manager(team_path="team")

    class Meta:
        ordering = ["start", "id"]

    def __str__(self) -> str:
        return f"RSV-{self.pk}: {self.gpu_count} × {self.gpu_model.name} ({self.get_term_display()})"

    @property
    def code(self) -> str:
        return f"RSV-{self.pk}"

    def status(self, now=None) -> str:
        now = now or timezone.now()
        if now < self.start:
            return "scheduled"
        return "active" if now < self.end else "expired"


class UsageRecord(models.Model):
    """Metered usage: one billable stretch of one instance within one charge period
    (a UTC day). Metering a window replaces the records of its days."""

    # No reference here is checked by the database row by row: a month's metering writes
    # tens of thousands of rows, and PostgreSQL's per-row foreign-key checks at commit
    # cost about as much as writing them. Metering checks instead, in one statement,
    # that the instances it bills exist, and holds them (FOR KEY SHARE) until it
    # commits (``billing.metering``); team and GPU model are copies of the instance's
    # own, checked, references. Deletes through the ORM still cascade or protect.
    team = models.ForeignKey("console.Team", on_delete=models.CASCADE, related_name="+", db_constraint=False,
                             db_index=False)
    instance = models.ForeignKey("instances.Instance", on_delete=models.CASCADE, related_name="usage_records",
                                 db_constraint=False)
    gpu_model = models.ForeignKey("instances.GpuModel", on_delete=models.PROTECT, related_name="+",
                                  db_constraint=False, db_index=False)
    sku = models.CharField(max_length=100)
    pricing_model = models.CharField(max_length=16)
    region = models.CharField(max_length=40, blank=True)
    period_start = models.DateTimeField()
    start = models.DateTimeField()
    end = models.DateTimeField()
    gpus = models.PositiveSmallIntegerField()
    run_start = models.DateTimeField()
    run_end = models.DateTimeField(null=True, blank=True)
    preempted = models.BooleanField(default=False)

    objects = TeamScopedQuerySet.as_manager(team_path="team")

    class Meta:
        ordering = ["period_start", "instance_id", "start"]
        indexes = [models.Index(fields=["period_start"]), models.Index(fields=["team", "period_start"])]

    def __str__(self) -> str:
        return f"{self.instance_id} {self.start:%Y-%m-%d %H:%M:%S}–{self.end:%H:%M:%S} × {self.gpus}"

    @property
    def gpu_seconds(self) -> int:
        return seconds(self.start, self.end) * self.gpus


class UnratedUsage(models.Model):
    """Usage metering could not rate (no price in effect, say): held here, shown to
    operators, and billed once the cause is fixed and the days are metered again. One
    team's unrated usage never stops the others' bills."""

    team = models.ForeignKey("console.Team", on_delete=models.CASCADE, related_name="+")
    instance = models.ForeignKey("instances.Instance", on_delete=models.CASCADE, related_name="+")
    sku = models.CharField(max_length=100)
    pricing_model = models.CharField(max_length=16)
    period_start = models.DateTimeField()
    start = models.DateTimeField()
    end = models.DateTimeField()
    gpus = models.PositiveSmallIntegerField()
    reason = models.CharField(max_length=300)
    found_at = models.DateTimeField(default=timezone.now)

    objects = TeamScopedQuerySet.as_manager(team_path="team")

    class Meta:
        ordering = ["period_start", "instance_id", "start"]
        indexes = [models.Index(fields=["period_start"])]

    def __str__(self) -> str:
        return f"{self.instance_id} {self.sku} {self.start:%Y-%m-%d %H:%M}: {self.reason}"

    @property
    def gpu_seconds(self) -> int:
        return seconds(self.start, self.end) * self.gpus


class ChargeType(models.TextChoices):
    USAGE = "usage", "Usage"
    UNUSED_COMMITMENT = "unused_commitment", "Unused commitment"


class PricingCategory(models.TextChoices):
    STANDARD = "standard", "Standard"
    COMMITTED = "committed", "Committed"
    DYNAMIC = "dynamic", "Dynamic"


class Charge(models.Model):
    """A rated line item: what one instance (or one reservation's unused part) costs in
    one charge period, at one price. ``billed_cost`` is rounded to the cent once, here;
    everything above it (invoices, charts, exports) only adds."""

    # As for usage records, metering checks the instance (or, for unused commitment, the
    # reservation) in one statement rather than the database row by row; team and GPU
    # model are copies of that instance's or reservation's own references.
    team = models.ForeignKey("console.Team", on_delete=models.CASCADE, related_name="+", db_constraint=False,
                             db_index=False)
    instance = models.ForeignKey("instances.Instance", null=True, blank=True, on_delete=models.CASCADE,
                                 related_name="charges", db_constraint=False)
    reservation = models.ForeignKey(Reservation, null=True, blank=True, on_delete=models.PROTECT,
                                    related_name="charges", db_constraint=False)
    gpu_model = models.ForeignKey("instances.GpuModel", on_delete=models.PROTECT, related_name="+",
                                  db_constraint=False, db_index=False)
    sku = models.CharField(max_length=100)
    region = models.CharField(max_length=40, blank=True)
    month = models.DateField(help_text="first day of the billing period")
    period_start = models.DateTimeField()
    period_end = models.DateTimeField()
    charge_type = models.CharField(max_length=24, choices=ChargeType.choices, default=ChargeType.USAGE)
    pricing_category = models.CharField(max_length=16, choices=PricingCategory.choices)
    consumed_seconds = models.BigIntegerField(help_text="GPU- (or slice-) seconds used")
    priced_seconds = models.BigIntegerField(help_text="GPU- (or slice-) seconds billed")
    unit_price = models.DecimalField(null=True, blank=True, **RATE)
    list_unit_price = models.DecimalField(**RATE)
    # Whole cents as integers, so sums in SQL are exact on every database.
    list_cents = models.BigIntegerField()
    billed_cents = models.BigIntegerField()
    note = models.CharField(max_length=120, blank=True)

    objects = TeamScopedQuerySet.as_manager(team_path="team")

    class Meta:
        ordering = ["period_start", "team_id", "instance_id", "id"]
        indexes = [
            models.Index(fields=["period_start"]),
            models.Index(fields=["team", "month"]),
            models.Index(fields=["team", "period_start"]),
        ]

    def __str__(self) -> str:
        return f"{self.period_start:%Y-%m-%d} {self.sku} {self.pricing_category} {self.billed_cost}"

    @property
    def billed_cost(self) -> Decimal:
        return from_cents(self.billed_cents)

    @property
    def list_cost(self) -> Decimal:
        return from_cents(self.list_cents)


class InvoiceStatus(models.TextChoices):
    DRAFT = "draft", "Draft"
    ISSUED = "issued", "Issued"


class Invoice(models.Model):
    """A team's bill for one calendar month (UTC). Draft while the month runs; issued
    at month end and never changed after; corrections land in a later invoice."""

    team = models.ForeignKey("console.Team", on_delete=models.PROTECT, related_name="invoices")
    month = models.DateField()
    period_start = models.DateTimeField()
    period_end = models.DateTimeField()
    status = models.CharField(max_length=8, choices=InvoiceStatus.choices, default=InvoiceStatus.DRAFT)
    number = models.CharField(max_length=40, blank=True)
    currency = models.CharField(max_length=3, default=currency)
    subtotal = models.DecimalField(default=0, **MONEY)
    adjustments = models.DecimalField(default=0, **MONEY)
    total = models.DecimalField(default=0, **MONEY)
    memo = models.CharField(max_length=200, blank=True)
    issued_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)

    objects = TeamScopedQuerySet.as_manager(team_path="team")

    class Meta:
        ordering = ["-month", "team__name"]
        constraints = [models.UniqueConstraint(fields=["team", "month"], name="one_invoice_per_team_month")]

    def __str__(self) -> str:
        return self.number or f"{self.team} {self.month:%Y-%m} (draft)"

    @property
    def is_issued(self) -> bool:
        return self.status == InvoiceStatus.ISSUED


class LineKind(models.TextChoices):
    USAGE = "usage", "Usage"
    UNUSED_COMMITMENT = "unused_commitment", "Unused commitment"
    CORRECTION = "correction", "Correction to an issued invoice"
    ADJUSTMENT = "adjustment", "Adjustment"


class InvoiceLine(models.Model):
    invoice = models.ForeignKey(Invoice, on_delete=models.CASCADE, related_name="lines")
    position = models.PositiveIntegerField()
    kind = models.CharField(max_length=24, choices=LineKind.choices)
    description = models.CharField(max_length=200)
    sku = models.CharField(max_length=100, blank=True)
    pricing_category = models.CharField(max_length=16, blank=True)
    instance = models.ForeignKey("instances.Instance", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    reservation = models.ForeignKey(Reservation, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    refers_to = models.ForeignKey(Invoice, null=True, blank=True, on_delete=models.PROTECT, related_name="corrected_by")
    quantity = models.DecimalField(max_digits=18, decimal_places=4, null=True, blank=True)
    unit = models.CharField(max_length=20, blank=True)
    unit_price = models.DecimalField(null=True, blank=True, **RATE)
    amount = models.DecimalField(**MONEY)

    class Meta:
        ordering = ["invoice_id", "position"]

    def __str__(self) -> str:
        return f"{self.description}: {self.amount}"


class Adjustment(models.Model):
    """A manual credit (negative) or charge, placed on the team's current draft invoice."""

    team = models.ForeignKey("console.Team", on_delete=models.PROTECT, related_name="+")
    invoice = models.ForeignKey(Invoice, on_delete=models.PROTECT, related_name="manual_adjustments")
    amount = models.DecimalField(**MONEY)
    reason = models.CharField(max_length=200)
    created_by = models.ForeignKey("auth.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    objects = TeamScopedQuerySet.as_manager(team_path="team")

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.amount} for {self.team}: {self.reason}"


class Budget(models.Model):
    """A team's spending limit for one calendar month, with alert thresholds in percent
    on actual spend and on the month-end forecast."""

    team = models.ForeignKey("console.Team", on_delete=models.CASCADE, related_name="budgets")
    month = models.DateField()
    amount = models.DecimalField(**MONEY)
    currency = models.CharField(max_length=3, default=currency)
    actual_thresholds = models.JSONField(default=list)
    forecast_thresholds = models.JSONField(default=list)
    recurring = models.BooleanField(default=False, help_text="carried into each next month until changed")
    created_by = models.ForeignKey("auth.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    objects = TeamScopedQuerySet.as_manager(team_path="team")

    class Meta:
        ordering = ["-month", "team__name"]
        constraints = [models.UniqueConstraint(fields=["team", "month"], name="one_budget_per_team_month")]

    def __str__(self) -> str:
        return f"{self.team} {self.month:%Y-%m}: {self.amount} {self.currency}"


class Basis(models.TextChoices):
    ACTUAL = "actual", "Actual spend"
    FORECAST = "forecast", "Forecast spend"


class BudgetAlert(models.Model):
    """One threshold of a budget, crossed once."""

    budget = models.ForeignKey(Budget, on_delete=models.CASCADE, related_name="alerts")
    team = models.ForeignKey("console.Team", on_delete=models.CASCADE, related_name="+")
    basis = models.CharField(max_length=8, choices=Basis.choices)
    percent = models.PositiveIntegerField()
    spend = models.DecimalField(**MONEY)
    crossed_at = models.DateTimeField(default=timezone.now)

    objects = TeamScopedQuerySet.as_manager(team_path="team")

    class Meta:
        ordering = ["-crossed_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["budget", "basis", "percent"], name="one_alert_per_threshold")]

    def __str__(self) -> str:
        return f"{self.budget}: {self.basis} passed {self.percent}%"


class MeterState(models.Model):
    """How far metering has run; the periodic task catches up from here."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    metered_until = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"metered until {self.metered_until}"
