"""The chaos server's public home: ``from harnessnb.chaos import ChaosServer, Fault, Reply``
(and ``google_error``, a Gemini error body for ``Fault.status``).

The server itself lives in ``harnessnb.demo`` beside the demo model it serves; this
module keeps the documented import path and ``python -m harnessnb.chaos``.
"""

from __future__ import annotations

from .demo._chaos import (
    RATE_FAULTS,
    ChaosRequest,
    ChaosServer,
    Fault,
    Reply,
    echo_responder,
    main,
)
from .demo._chaos_gemini import google_error

__all__ = [
    "RATE_FAULTS",
    "ChaosRequest",
    "ChaosServer",
    "Fault",
    "Reply",
    "echo_responder",
    "google_error",
]

if __name__ == "__main__":
    main()
