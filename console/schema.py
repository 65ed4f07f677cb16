"""OpenAPI description of the personal API token scheme, and the schema generated once."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.generators import SchemaGenerator


class ApiTokenScheme(OpenApiAuthenticationExtension):
    target_class = "console.auth.ApiTokenAuthentication"
    name = "ApiToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "Personal API token from POST /api/v1/auth/token/, sent as `Token gpc_…`.",
        }


class OnceSchemaGenerator(SchemaGenerator):
    """The public OpenAPI schema, generated once per process, URL configuration and API
    version: it is the code's own, the same for every caller (``SERVE_PUBLIC``), and
    generating it takes about a second, which every visit to /api/docs/ waited for. A
    schema filtered by the caller's permissions (not public) is generated each time."""

    _schemas: dict = {}

    def get_schema(self, request=None, public=False):
        if not public:
            return super().get_schema(request=request, public=public)
        key = (self.urlconf, self.api_version)
        if key not in self._schemas:
            self._schemas[key] = super().get_schema(request=request, public=public)
        return self._schemas[key]
