"""Server CPU to read one agent samples frame (decode and every check), per GPU-sample.

    PYTHONPATH=. .venv/bin/python bench/frame_read.py now
    cd OLD_CHECKOUT && PYTHONPATH=. /path/to/.venv/bin/python /path/to/bench/frame_read.py before

A frame of 500 records from the sim backend (8 GPUs), encoded by the agent's own
encoder; best of 30 reads. An older checkout (frames.parse + frames.samples) is read
the way it read frames then.
"""

from __future__ import annotations

import os
import sys
import time


def frame_text() -> str:
    from agent import protocol
    from agent.backends.sim import SimSource

    sim = SimSource.synthetic(1, 8, prefix="bench-host", seed=1)
    bodies, seq, tick, start = [], 0, 0, time.time() - 600
    while len(bodies) < 500:
        for records in sim.tick(start + tick).values():
            for record in records:
                if hasattr(protocol, "encode_record"):
                    body = protocol.encode_record(record, seq + 1)
                else:  # a checkout before the agent encoded with the wire schema
                    clean = protocol.clean_record(record)
                    body = None if clean is None else protocol.dumps({**clean, "seq": seq + 1})
                if body is not None:
                    seq += 1
                    bodies.append(body)
        tick += 1
    return protocol.samples_frame("b" * 32, bodies[:500])


def main() -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuconsole.settings")
    import django

    django.setup()
    from monitoring import frames

    text = frame_text()

    def read() -> None:
        if hasattr(frames, "read"):
            frames.read(text, now=time.time())
        else:  # the checkout before the wire schema
            frames.samples(frames.parse(text), now=time.time(), known=set())

    best = float("inf")
    for _ in range(30):
        started = time.perf_counter()
        read()
        best = min(best, time.perf_counter() - started)
    label = sys.argv[1] if len(sys.argv) > 1 else "this checkout"
    print(f"{label}: {len(text)} bytes, {best * 1e6 / 500:.2f} us per GPU-sample")
    return 0


if __name__ == "__main__":
    sys.exit(main())
