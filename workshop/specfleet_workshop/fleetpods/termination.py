"""How an engine's command serves until it is stopped, the same for the simulator and real vLLM."""

import signal
import threading


class Termination:
    """SIGTERM, caught from the moment this exists (made before the engine starts, so a stop is never lost);
    `wait` serves until it comes, or Ctrl-C."""

    def __init__(self) -> None:
        self._requested = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: self._requested.set())

    def wait(self) -> None:
        try:
            while not self._requested.wait(1.0):
                pass
        except KeyboardInterrupt:
            pass
