"""The learned rest keyed by position and action type: what the trajectories ran
after each (position, type), summed, where 0011 kept what they ran at each
position. The old sums cannot be split by type, so they are dropped and every
ended trajectory is folded again from its actions."""

from django.db import migrations, models


def refold_every_trajectory(apps, schema_editor):
    Action = apps.get_model("actions", "Action")
    Action.objects.filter(trajectory_counted=True).update(trajectory_counted=False)


class Migration(migrations.Migration):
    dependencies = [
        ("actions", "0011_trajectory_position"),
    ]

    operations = [
        migrations.RunSQL(
            "DELETE FROM actions_trajectorypositionstat", reverse_sql=migrations.RunSQL.noop
        ),
        migrations.RunPython(refold_every_trajectory, migrations.RunPython.noop),
        migrations.RemoveConstraint(
            model_name="trajectorypositionstat",
            name="trajectory_position_stat_unique",
        ),
        migrations.RemoveField(
            model_name="trajectorypositionstat",
            name="work_s",
        ),
        migrations.AddField(
            model_name="trajectorypositionstat",
            name="type",
            field=models.CharField(default="", max_length=64),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="trajectorypositionstat",
            name="rest_s",
            field=models.FloatField(default=0.0),
        ),
        migrations.AddConstraint(
            model_name="trajectorypositionstat",
            constraint=models.UniqueConstraint(
                fields=("tenant", "job", "position", "type"),
                name="trajectory_position_type_stat_unique",
            ),
        ),
    ]
