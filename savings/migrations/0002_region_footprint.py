import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("instances", "0009_instance_failed_state"),
        ("savings", "0001_initial"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="RegionFootprint",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("pue", models.DecimalField(decimal_places=2, max_digits=4)),
                ("grid_g_co2e_per_kwh", models.DecimalField(decimal_places=1, max_digits=6)),
                ("updated_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("region", models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name="+",
                                                to="instances.region")),
                ("updated_by", models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL,
                                                 related_name="+", to=settings.AUTH_USER_MODEL)),
            ],
        ),
    ]
