from django.db import migrations


def create_head(apps, schema_editor):
    apps.get_model("audit", "ChainHead").objects.get_or_create(id=1)


class Migration(migrations.Migration):
    dependencies = [("audit", "0001_initial")]
    operations = [migrations.RunPython(create_head, migrations.RunPython.noop)]
