from django.conf import settings
from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


@staff_member_required
def dashboard_view(request: HttpRequest) -> HttpResponse:
    """The page only; its data arrives over ``ws/dashboard/``."""
    return render(request, "dashboard/index.html", {"login_url": settings.LOGIN_URL})
