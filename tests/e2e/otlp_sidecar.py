"""A minimal OTLP/HTTP receiver for the e2e kit's --sidecar.

Runs inside the scenario's network namespace, listens on 127.0.0.1:$OTLP_PORT
(default 4318) and saves every POSTed body (gunzipped) under
$E2E_OUTDIR/otlp/ as NNNN-traces.pb, NNNN-metrics.pb or NNNN-logs.pb (a POST to /hook, an
alert webhook's, as NNNN-webhook.json; one to /api/v1/rpc, signal-cli's
JSON-RPC API that Hermes's Signal sender calls, as NNNN-signal.json,
answered as signal-cli answers a send), answering with an
empty (valid) export response, and appends ``NNNN kind unix-time`` to
``otlp/arrivals.tsv`` before answering (the time the body arrived, for tests
that check what a process sent before it ended). Decoding is the test's job.
"""

from __future__ import annotations

import gzip
import itertools
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

OUT = Path(os.environ["E2E_OUTDIR"]) / "otlp"
OUT.mkdir(parents=True, exist_ok=True)
COUNTER = itertools.count(1)
LOCK = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        kind = {
            "/v1/traces": "traces",
            "/v1/metrics": "metrics",
            "/v1/logs": "logs",
            "/hook": "webhook",
            # signal-cli's JSON-RPC API, as Hermes's Signal sender calls it.
            "/api/v1/rpc": "signal",
        }.get(self.path)
        if kind is None:
            self.send_response(404)
            self.end_headers()
            return
        with LOCK:
            n = next(COUNTER)
        (OUT / f"{n:04d}-{kind}.{'pb' if kind in ('traces', 'metrics', 'logs') else 'json'}").write_bytes(
            body
        )
        with LOCK, (OUT / "arrivals.tsv").open("a") as f:
            f.write(f"{n:04d}\t{kind}\t{time.time():.6f}\n")
        answer = b""
        if kind == "signal":
            request_id = json.loads(body).get("id")
            answer = json.dumps(
                {"jsonrpc": "2.0", "result": {"timestamp": int(time.time() * 1000)}, "id": request_id}
            )
            answer = answer.encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json" if answer else "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args) -> None:
        pass


ThreadingHTTPServer(("127.0.0.1", int(os.environ.get("OTLP_PORT", "4318"))), Handler).serve_forever()
