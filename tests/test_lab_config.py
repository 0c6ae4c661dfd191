"""jupyter-env/etc/jupyter/jupyter_server_config.py: the lab's kernel websockets send each
message at once (TCP_NODELAY), so a widget's answer is not held back ~40 ms behind the
browser's delayed acknowledgement (benchmarks/drag_round_trip.py measures the round trip)."""

import asyncio
import runpy
from pathlib import Path

from jupyter_server.services.kernels.websocket import KernelWebsocketHandler

CONFIG = Path(__file__).resolve().parents[1] / "jupyter-env/etc/jupyter/jupyter_server_config.py"


class FakeHandler:
    def __init__(self):
        self.calls = []

    def set_nodelay(self, value):
        self.calls.append(("set_nodelay", value))


def test_the_kernel_websocket_turns_nagle_off_before_it_opens(monkeypatch):
    async def original_open(self, kernel_id):
        self.calls.append(("open", kernel_id))

    monkeypatch.setattr(KernelWebsocketHandler, "open", original_open)
    runpy.run_path(str(CONFIG))  # patches KernelWebsocketHandler.open, as Jupyter loads it
    handler = FakeHandler()
    asyncio.run(KernelWebsocketHandler.open(handler, "kernel-1"))
    assert handler.calls == [("set_nodelay", True), ("open", "kernel-1")]
