from drf_spectacular.views import SpectacularAPIView
from rest_framework.response import Response

from console.policy import policy_required
from monitoring.pages import overview


@policy_required("signed_in")
def home(request):
    """The console opens on the fleet overview, which lives with the live telemetry."""
    return overview(request)


class SchemaView(SpectacularAPIView):
    """The OpenAPI schema, generated once per process and API version: it is the code's
    own, the same for every caller (``SERVE_PUBLIC``), and generating it takes about a
    second, which every visit to /api/docs/ waited for."""

    _schemas: dict = {}

    def _get_schema_response(self, request):
        version = self.api_version or request.version or self._get_version_parameter(request)
        if version not in self._schemas:
            generator = self.generator_class(urlconf=self.urlconf, api_version=version, patterns=self.patterns)
            self._schemas[version] = generator.get_schema(request=request, public=self.serve_public)
        return Response(data=self._schemas[version],
                        headers={"Content-Disposition": f'inline; filename="{self._get_filename(request, version)}"'})
