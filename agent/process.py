"""What the agent's process shares: its exit codes, and handing freed memory back."""

from __future__ import annotations

import ctypes

EXIT_OK, EXIT_FAILED, EXIT_REFUSED, EXIT_INTERRUPTED = 0, 1, 2, 130


def trim_memory() -> None:
    """Return the C heap's free pages to the system (glibc's malloc_trim; elsewhere
    nothing). NVML's start-up and the agent's imports leave several MiB freed but
    resident; handing them back keeps the resident size near what the agent holds."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass
