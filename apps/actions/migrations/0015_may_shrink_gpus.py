"""Whether a running action can give GPUs back (checkpointing data-parallel work)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("actions", "0014_may_split_gpus"),
    ]

    operations = [
        migrations.AddField(
            model_name="action",
            name="may_shrink_gpus",
            field=models.BooleanField(default=False),
        ),
    ]
