from console.policy import policy_required
from monitoring.pages import overview


@policy_required("signed_in")
def home(request):
    """The console opens on the fleet overview, which lives with the live telemetry."""
    return overview(request)
