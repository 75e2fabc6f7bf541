"""A stand-in engine for the GPU release check: allocates --gib GiB on cuda:0, then serves
GET /health on 127.0.0.1:--port until SIGTERM. Run by the agent as a `generic` profile."""
import argparse
import http.server
import signal
import sys

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--port", type=int, required=True)
ap.add_argument("--gib", type=int, default=4)
a = ap.parse_args()
held = torch.empty(a.gib << 30, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
print(f"allocated {a.gib} GiB on cuda:0", flush=True)


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


srv = http.server.HTTPServer(("127.0.0.1", a.port), Health)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
srv.serve_forever()
