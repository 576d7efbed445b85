from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from apps.actions.api import ActionCancelApi, ActionListCreateApi, action_detail_view
from apps.inventory.api import NodeListApi
from apps.tenants.api import TenantMeApi

api_v1 = [
    path("actions", ActionListCreateApi.as_view(), name="action-list"),
    path("actions/<str:action_id>", action_detail_view, name="action-detail"),
    path("actions/<str:action_id>/cancel", ActionCancelApi.as_view(), name="action-cancel"),
    path("tenants/me", TenantMeApi.as_view(), name="tenant-me"),
    path("nodes", NodeListApi.as_view(), name="node-list"),
    path("schema", SpectacularAPIView.as_view(), name="schema"),
    path("docs", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
]

urlpatterns = [
    path("api/v1/", include(api_v1)),
    path("admin/", admin.site.urls),
    path("", include("apps.dashboard.urls")),
]
