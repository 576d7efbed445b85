"""``make run``'s command: its local agent as told, and a bad setting refused with a clear
message before serving anything."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from apps.core.management.commands.tangram_serve import Command
from apps.tenants.models import ApiToken


@pytest.mark.django_db
def test_a_too_short_demo_token_is_refused_naming_the_setting(settings, tmp_path):
    settings.TANGRAM_DEMO_TOKEN = "short"
    settings.VAR_DIR = tmp_path
    with pytest.raises(CommandError, match="TANGRAM_DEMO_TOKEN: A token needs at least 16"):
        call_command("tangram_serve", "--no-agent")
    assert not ApiToken.objects.exists()


def test_the_local_agent_offers_the_gpus_and_the_sandbox_python_it_is_given(tmp_path):
    parser = Command().create_parser("manage.py", "tangram_serve")
    argv = ["--agent-gpus", "0,1/2", "--agent-sandbox-python", "/usr/bin/python3"]
    options = vars(parser.parse_args([*argv, "--agent-sandbox-ro-bind", f"{tmp_path}:/models"]))
    config = Command._agent(options, "http://127.0.0.1:9", "token").config
    assert config.gpu_groups == (("0", "1"), ("2",)) and config.capacity["gpu"] == 3
    sandbox = config.sandbox_settings()
    assert sandbox.python == "/usr/bin/python3"
    assert sandbox.ro_binds == ((str(tmp_path), "/models"),)
    plain = vars(parser.parse_args([]))
    assert Command._agent(plain, "http://127.0.0.1:9", "token").config.gpu_groups == ()


@pytest.mark.django_db
def test_a_bad_local_agent_option_is_refused_naming_it(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    with pytest.raises(CommandError, match="--agent-gpus: '0,0': GPU id '0' is listed twice"):
        call_command("tangram_serve", "--agent-gpus", "0,0")
    with pytest.raises(CommandError, match="the local agent: --sandbox-python /nonexistent"):
        call_command("tangram_serve", "--agent-sandbox-python", "/nonexistent/python3")
