"""``make run``'s command refuses a bad setting with a clear message before serving anything."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from apps.tenants.models import ApiToken


@pytest.mark.django_db
def test_a_too_short_demo_token_is_refused_naming_the_setting(settings, tmp_path):
    settings.TANGRAM_DEMO_TOKEN = "short"
    settings.VAR_DIR = tmp_path
    with pytest.raises(CommandError, match="TANGRAM_DEMO_TOKEN: A token needs at least 16"):
        call_command("tangram_serve", "--no-agent")
    assert not ApiToken.objects.exists()
