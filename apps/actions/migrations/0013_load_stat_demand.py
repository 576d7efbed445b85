"""A type's whole demand beside its primary kind, so that the room kept for it
between steps covers its memory as well as its cores."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("actions", "0012_trajectory_rest_by_type"),
    ]

    operations = [
        migrations.AddField(
            model_name="actionloadstat",
            name="demand",
            field=models.JSONField(blank=True, default=dict),
        ),
    ]
