from django.db import migrations

# Alerts, rules, silences, channels, notifications and deliveries now belong to the
# alerting app (alerting/migrations/0001_initial.py). Their tables stay as they are and
# keep their names; only Django's record of which app owns them changes.


class Migration(migrations.Migration):

    dependencies = [
        ('monitoring', '0013_gpu_health_diagnostics'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name='Delivery'),
                migrations.DeleteModel(name='Notification'),
                migrations.DeleteModel(name='Silence'),
                migrations.DeleteModel(name='NotificationChannel'),
                migrations.DeleteModel(name='Alert'),
                migrations.DeleteModel(name='AlertRule'),
            ],
        ),
    ]
