"""Whether an action's GPUs may span NVLink groups (data-parallel work)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("actions", "0013_load_stat_demand"),
    ]

    operations = [
        migrations.AddField(
            model_name="action",
            name="may_split_gpus",
            field=models.BooleanField(default=False),
        ),
    ]
