"""The asyncio option, as a prototype for bench.web_idle only: stdlib asyncio.start_server
answering /healthz and a small /metrics, TLS through the same kind of SSLContext.

    python -m bench.web_idle_asyncio PORT [CERT KEY]

Not the exporter: it measures what an asyncio server costs per idle connection.
"""

import asyncio
import ssl
import sys

from prometheus_client import CollectorRegistry, Gauge, generate_latest

REGISTRY = CollectorRegistry()
Gauge("kubescale_build_info", "prototype", registry=REGISTRY).set(1)


async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 120)
            path = head.split(b" ", 2)[1]
            body = generate_latest(REGISTRY) if path == b"/metrics" else b"ok\n"
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()
    except (
        TimeoutError,
        asyncio.IncompleteReadError,
        ConnectionError,
        ssl.SSLError,
        asyncio.LimitOverrunError,
    ):
        pass
    finally:
        writer.close()


async def main(port: int, cert: str | None, key: str | None) -> None:
    context = None
    if cert:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
    server = await asyncio.start_server(
        serve,
        "127.0.0.1",
        port,
        ssl=context,
        backlog=4096,
        ssl_handshake_timeout=10 if context else None,
    )
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    args = sys.argv[1:] + [None, None]
    asyncio.run(main(int(args[0]), args[1], args[2]))
