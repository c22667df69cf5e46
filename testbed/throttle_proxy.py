"""A loopback TCP proxy that slows server-to-client bytes, so a real pull lasts seconds.

Runs as its own process (`python -m testbed.throttle_proxy LISTEN TARGET RATE`)
so that tests and benchmarks stop it by PID and its pumping never shares their GIL.
RATE is bytes per second per connection.
"""

import asyncio
import os
import sys
import time

from .procs import Proc, start_on_free_port

TICK = 0.05  # seconds between throttled writes: smooth enough for second-scale scrapes


async def _pump(reader, writer, rate):
    try:
        while True:
            chunk = await reader.read(max(1, int(rate * TICK)) if rate else 65536)
            if not chunk:
                break
            writer.write(chunk)
            await writer.drain()
            if rate:
                await asyncio.sleep(len(chunk) / rate)
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def _serve(listen_port, target_port, rate):
    async def handle(client_r, client_w):
        try:
            server_r, server_w = await asyncio.open_connection("127.0.0.1", target_port)
        except OSError:
            client_w.close()
            return
        await asyncio.gather(_pump(client_r, server_w, 0), _pump(server_r, client_w, rate))

    server = await asyncio.start_server(handle, "127.0.0.1", listen_port)
    async with server:
        await server.serve_forever()


class ThrottleProxy:
    """The proxy as a child process; `host` is what clients connect to instead."""

    def __init__(self, workdir, target_port, rate):
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        self.proc, self.port = start_on_free_port(
            lambda port: Proc(
                [
                    sys.executable,
                    "-m",
                    "testbed.throttle_proxy",
                    str(port),
                    str(target_port),
                    str(int(rate)),
                ],
                os.path.join(str(workdir), f"proxy-{port}.log"),
                cwd=root,
            )
        )
        self.host = f"127.0.0.1:{self.port}"

    def stop(self):
        self.proc.stop()


if __name__ == "__main__":
    listen, target, bytes_per_second = (int(a) for a in sys.argv[1:4])
    print(
        f"{time.strftime('%H:%M:%S')} proxy 127.0.0.1:{listen} -> :{target} "
        f"at {bytes_per_second} B/s per connection",
        flush=True,
    )
    asyncio.run(_serve(listen, target, bytes_per_second))
