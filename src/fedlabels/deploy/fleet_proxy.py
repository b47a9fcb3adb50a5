"""A Fleet-API-only TLS front for the SuperLink: what the sites (and anyone else) can reach.

flwr 1.41 serves the Fleet API (SuperNodes), the Control API (``flwr run``, ``flwr
supernode register|list``, with no authentication in open-source Flower) and the Runtime
API (the ServerApp's process) on **one** HTTP(S) port. Exposing that port lets anyone who
holds ``ca.crt`` submit runs, register SuperNode keys and list nodes. So the coordinator
binds the SuperLink to 127.0.0.1 and exposes only this proxy:

* it terminates TLS with the SuperLink's certificate (``server.crt`` / ``server.key``);
* it forwards ``POST /v1/fleet/<call>`` (``<call>`` lower-case letters and dashes) to the
  SuperLink on loopback, over TLS checked against ``ca.crt``, bodies and Flower's signed
  SuperNode-authentication headers unchanged;
* it answers everything else — ``/v1/control/…``, ``/v1/runtime/…``, ``/docs``, other
  methods, encoded or dotted paths — with 403, without contacting the SuperLink.

The Control API stays reachable on the coordinator's loopback only (a remote researcher uses
an SSH tunnel, see docs/deployment.md). This module imports no Flower code; it uses the
starlette, httpx and uvicorn packages Flower brings.
"""

from __future__ import annotations

import re
import ssl
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

from fedlabels.core.errors import FedLabelsError

FLEET_PATH = re.compile(r"/v1/fleet/[a-z][a-z-]{0,63}")
#: request headers passed on (Flower's node authentication and protobuf content type)
FORWARDED = ("content-type", "accept", "x-flwr-", "flwr-")
#: response headers not passed back (httpx has already decoded and de-chunked the body)
HOP_BY_HOP = frozenset({"content-length", "transfer-encoding", "connection", "keep-alive",
                        "content-encoding", "server", "date"})
MAX_BODY = 256 * 2**20
REFUSED = (b'{"detail":"fedlabels fleet proxy: only the Fleet API (POST /v1/fleet/...) is '
           b'served on this address"}')

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def allowed(method: str, raw_path: bytes) -> bool:
    """Whether a request is a Fleet API call (checked on the raw, undecoded path)."""
    try:
        path = raw_path.decode("ascii")
    except UnicodeDecodeError:
        return False
    return method == "POST" and FLEET_PATH.fullmatch(path) is not None


def _forwarded(headers: list[tuple[bytes, bytes]]) -> dict[str, str]:
    out = {}
    for name, value in headers:
        key = name.decode("latin-1").lower()
        if key.startswith(FORWARDED):
            out[key] = value.decode("latin-1")
    return out


class FleetProxy:
    """ASGI app: Fleet API calls go to ``upstream``; everything else gets 403."""

    def __init__(self, upstream: str, ca_cert: str | None) -> None:
        import httpx

        verify: ssl.SSLContext | bool = (ssl.create_default_context(cafile=ca_cert)
                                         if ca_cert else False)
        self.upstream = upstream.rstrip("/")
        self.client = httpx.AsyncClient(verify=verify, timeout=httpx.Timeout(None))
        self.refused = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await self.client.aclose()
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        raw_path = scope.get("raw_path") or scope["path"].encode()
        if scope.get("query_string") or not allowed(scope["method"], raw_path):
            self.refused += 1
            await _respond(send, 403, REFUSED, "application/json")
            return
        body = b""
        more = True
        while more:
            event = await receive()
            body += event.get("body", b"")
            more = event.get("more_body", False)
            if len(body) > MAX_BODY:
                await _respond(send, 413, b"", "text/plain")
                return
        response = await self.client.post(self.upstream + raw_path.decode("ascii"),
                                          content=body, headers=_forwarded(scope["headers"]))
        headers = [(k.encode("latin-1"), v.encode("latin-1"))
                   for k, v in response.headers.items() if k.lower() not in HOP_BY_HOP]
        await _respond(send, response.status_code, response.content, headers=headers)


async def _respond(send: Send, status: int, body: bytes, content_type: str = "",
                   headers: list[tuple[bytes, bytes]] | None = None) -> None:
    out = list(headers or [(b"content-type", content_type.encode("latin-1"))])
    out.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": out})
    await send({"type": "http.response.body", "body": body})


def serve(listen_host: str, listen_port: int, upstream: str, *, certfile: str, keyfile: str,
          ca_cert: str) -> None:
    """Serve the Fleet API of the SuperLink at ``upstream`` on ``listen_host:listen_port``."""
    import uvicorn

    if not upstream.startswith("https://"):
        raise FedLabelsError(f"the fleet proxy forwards to the SuperLink over TLS; give "
                             f"--superlink as https://127.0.0.1:PORT, not {upstream!r}.")
    # uvicorn runs at log level warning: without this line the coordinator saw nothing
    print(f"fedlabels fleet proxy: starting on {listen_host}:{listen_port}; forwarding only "
          f"the Fleet API (POST /v1/fleet/...) to {upstream}, 403 for everything else",
          file=sys.stderr, flush=True)
    uvicorn.run(FleetProxy(upstream, ca_cert), host=listen_host, port=listen_port,
                ssl_certfile=certfile, ssl_keyfile=keyfile, log_level="warning",
                server_header=False, proxy_headers=False)


def main(argv: list[str] | None = None) -> None:
    """``python -m fedlabels.deploy.fleet_proxy --listen 0.0.0.0:9092 ...``."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m fedlabels.deploy.fleet_proxy",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--listen", required=True, help="HOST:PORT the sites connect to")
    parser.add_argument("--superlink", required=True,
                        help="the SuperLink on loopback, e.g. https://127.0.0.1:9093")
    parser.add_argument("--ssl-certfile", required=True)
    parser.add_argument("--ssl-keyfile", required=True)
    parser.add_argument("--ssl-ca-certfile", required=True)
    args = parser.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    if not host or not port.isdigit():
        parser.error(f"--listen must be HOST:PORT, e.g. 0.0.0.0:9092; got {args.listen!r}")
    for flag, path in (("--ssl-certfile", args.ssl_certfile),
                       ("--ssl-keyfile", args.ssl_keyfile),
                       ("--ssl-ca-certfile", args.ssl_ca_certfile)):
        if not Path(path).is_file():
            parser.error(f"{flag} {path!r} does not exist or is not a file (fedlabels "
                         "deploy certs writes server.crt, server.key and ca.crt)")
    try:
        serve(host, int(port), args.superlink, certfile=args.ssl_certfile,
              keyfile=args.ssl_keyfile, ca_cert=args.ssl_ca_certfile)
    except FedLabelsError as exc:
        parser.error(str(exc))


if __name__ == "__main__":
    main()
