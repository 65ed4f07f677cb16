import django.db.models.deletion
from django.db import migrations, models


def open_current_holds(apps, schema_editor):
    """Every GPU and slice held now gets an open hold from its instance's latest
    (re)start, so telemetry keeps its attribution across the upgrade."""
    Gpu = apps.get_model("instances", "Gpu")
    GpuSlice = apps.get_model("instances", "GpuSlice")
    GpuHold = apps.get_model("instances", "GpuHold")
    LifecycleEvent = apps.get_model("instances", "LifecycleEvent")

    def since(instance):
        event = LifecycleEvent.objects.filter(instance=instance, to_state="pending").order_by("-time").first()
        return event.time if event else instance.created_at

    holds = []
    for gpu in Gpu.objects.filter(instance__isnull=False).select_related("instance"):
        holds.append(GpuHold(gpu=gpu, instance=gpu.instance, team_id=gpu.instance.team_id, start=since(gpu.instance)))
    for piece in GpuSlice.objects.filter(instance__isnull=False).select_related("instance"):
        holds.append(GpuHold(gpu_id=piece.gpu_id, slice=piece, instance=piece.instance,
                             team_id=piece.instance.team_id, start=since(piece.instance)))
    GpuHold.objects.bulk_create(holds)


class Migration(migrations.Migration):

    dependencies = [
        ('console', '0001_initial'),
        ('instances', '0002_preemption_notice_moves_here'),
    ]

    operations = [
        migrations.CreateModel(
            name='GpuHold',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('start', models.DateTimeField()),
                ('end', models.DateTimeField(blank=True, null=True)),
                ('gpu', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='holds', to='instances.gpu')),
                ('instance', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='holds', to='instances.instance')),
                ('slice', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='holds', to='instances.gpuslice')),
                ('team', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='console.team')),
            ],
            options={
                'ordering': ['start', 'id'],
                'indexes': [models.Index(fields=['gpu', 'start'], name='gpuhold_gpu_start')],
            },
        ),
        migrations.RunPython(open_current_holds, migrations.RunPython.noop),
    ]
