"""gpuconsole-agent: reads GPU telemetry on a host and streams it to GPU Console.

Importable without Django: it depends on the standard library, ``websockets``
(for the uplink) and, in the nvml backend only, ``pynvml``.
"""

__version__ = "0.1.0"
