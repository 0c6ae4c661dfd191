"""This project's JupyterLab server settings beside jupyter_lab_config.json (copied into the
environment by the Makefile; never the user's home).

Send every message on a kernel's websocket at once. Tornado leaves Nagle's algorithm on for
websockets unless the handler turns it off, and jupyter_server does not: a kernel's answer that
follows another small message (ipywidgets' echo, the busy status) then waits for the browser's
delayed acknowledgement, about 40 ms. The widgets you drag wait for every answer, so their
round trip doubled, from about 10 ms to about 50 ms.
"""

from jupyter_server.services.kernels.websocket import KernelWebsocketHandler

_open_kernel_websocket = KernelWebsocketHandler.open


async def _open_without_delay(self, *args, **kwargs):
    self.set_nodelay(True)
    return await _open_kernel_websocket(self, *args, **kwargs)


KernelWebsocketHandler.open = _open_without_delay
