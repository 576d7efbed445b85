"""The dashboard page: staff get it, everyone else is sent to the admin login."""

from __future__ import annotations

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


def test_staff_get_the_page_with_its_script_and_socket_path(staff_user):
    client = Client()
    client.force_login(staff_user)

    response = client.get("/")

    assert response.status_code == 200
    html = response.content.decode()
    assert 'data-ws-path="/ws/dashboard/"' in html
    assert "/static/dashboard/dashboard.js" in html
    assert "/static/dashboard/dashboard.css" in html


@pytest.mark.parametrize("who", ["anonymous", "member"])
def test_others_are_sent_to_the_login(who, member_user):
    client = Client()
    if who == "member":
        client.force_login(member_user)

    response = client.get("/")

    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")
