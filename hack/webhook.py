#!/usr/bin/env python3
"""The demo's Alertmanager receiver: a webhook on ADDR:PORT that prints one line per alert of each
notification Alertmanager sends (what a Slack channel or pager would show), and answers 200."""

import json
import sys
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, HTTPServer


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
        try:
            note = json.loads(body)
        except ValueError:
            return
        now = datetime.now(timezone.utc).strftime("%H:%M:%S")
        for alert in note.get("alerts", []):
            labels, notes = alert.get("labels", {}), alert.get("annotations", {})
            print(
                f"{now} {alert.get('status', '?').upper():8} {labels.get('alertname', '')}: "
                f"{notes.get('summary', '')} (count {notes.get('count', '?')})",
                flush=True,
            )

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    HTTPServer((sys.argv[1], int(sys.argv[2])), Receiver).serve_forever()
