"""``lend_guarantee`` (all or nothing) becomes ``lending_limit`` (how much): a row
that did not lend keeps lending nothing (0); one that lent keeps lending all (null)."""

from django.db import migrations, models


def not_lent_to_zero(apps, schema_editor):
    Quota = apps.get_model("tenants", "Quota")
    Quota.objects.filter(lend_guarantee=False).update(lending_limit=0)


def zero_to_not_lent(apps, schema_editor):
    Quota = apps.get_model("tenants", "Quota")
    Quota.objects.filter(lending_limit__lt=models.F("guaranteed")).update(lend_guarantee=False)


class Migration(migrations.Migration):
    dependencies = [
        ("tenants", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="quota",
            name="lending_limit",
            field=models.FloatField(
                blank=True,
                help_text="The most of this tenant's idle guarantee others may borrow "
                "(empty: all of it; 0: none).",
                null=True,
            ),
        ),
        migrations.RunPython(not_lent_to_zero, zero_to_not_lent),
        migrations.RemoveField(
            model_name="quota",
            name="lend_guarantee",
        ),
        migrations.AddConstraint(
            model_name="quota",
            constraint=models.CheckConstraint(
                condition=models.Q(lending_limit__isnull=True)
                | models.Q(lending_limit__gte=0, lending_limit__lte=models.F("guaranteed")),
                name="quota_lending_limit_within_guaranteed",
            ),
        ),
    ]
