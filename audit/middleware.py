from console import request_context as context


class RequestContextMiddleware:
    """Binds the audit request context (source IP, user agent, request id) for the request."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        ctx = context.from_django_request(request)
        request.audit_context = ctx
        token = context.bind(ctx)
        try:
            response = self.get_response(request)
        finally:
            context.unbind(token)
        response["X-Request-ID"] = ctx.request_id
        return response
