"""The chaos server's public home: ``from harnessnb.chaos import ChaosServer, Fault, Reply``.

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

__all__ = ["RATE_FAULTS", "ChaosRequest", "ChaosServer", "Fault", "Reply", "echo_responder"]

if __name__ == "__main__":
    main()
