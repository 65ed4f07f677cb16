from django.contrib.auth.decorators import login_required

from monitoring.pages import overview


@login_required
def home(request):
    """The console opens on the fleet overview, which lives with the live telemetry."""
    return overview(request)
