#!/usr/bin/env python3
"""Watches one alertname in an Alertmanager through a rollout (bench/rollout.sh): every POLL seconds
until SIGTERM, the alerts its API v2 holds active, one JSON line per poll on stdout:

    {"t": <ms since the epoch>, "active": <alerts>, "lapsed": [<fingerprints>], "back": [...]}

An alert has lapsed, that is resolved and then fired again (what a receiver would see as a second
notification), when it was active at one poll and either is missing from a later one (Alertmanager
leaves an alert out once its endsAt has passed) or comes back updated after the endsAt it had: the
second catches a lapse shorter than the poll. `lapsed` names each at the poll that found it,
`back` each that is active again after being missing.

Usage: rollout_alerts.py AM_URL ALERTNAME POLL_SECONDS
"""

import json
import signal
import sys
import time
import urllib.parse
import urllib.request
from datetime import datetime


def parse_time(s):
    # Alertmanager writes RFC 3339 with up to nanoseconds; Python parses microseconds.
    head, _, frac = s.rstrip("Z").partition(".")
    frac = (frac + "000000")[:6]
    return datetime.fromisoformat(f"{head}.{frac}+00:00").timestamp()


def active(url, alertname):
    query = urllib.parse.urlencode({"filter": f'alertname="{alertname}"'})
    with urllib.request.urlopen(f"{url}/api/v2/alerts?{query}", timeout=20) as r:
        alerts = json.load(r)
    return {a["fingerprint"]: (parse_time(a["updatedAt"]), parse_time(a["endsAt"])) for a in alerts}


def main():
    url, alertname, poll = sys.argv[1].rstrip("/"), sys.argv[2], float(sys.argv[3])
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    seen = {}  # fingerprint -> (updatedAt, endsAt) when last active
    missing = set()
    while not stop:
        t0 = time.time()
        try:
            now = active(url, alertname)
        except (OSError, ValueError) as e:
            print(json.dumps({"t": int(t0 * 1000), "error": str(e)}), flush=True)
            time.sleep(poll)
            continue
        lapsed, back = [], []
        for fp, (updated, ends) in now.items():
            if fp in missing:
                missing.discard(fp)
                back.append(fp)
            elif fp in seen and updated > seen[fp][1]:
                lapsed.append(fp)
            seen[fp] = (updated, ends)
        for fp in seen.keys() - now.keys() - missing:
            missing.add(fp)
            lapsed.append(fp)
        print(json.dumps({"t": int(t0 * 1000), "active": len(now), "lapsed": lapsed, "back": back}), flush=True)
        time.sleep(max(0.0, poll - (time.time() - t0)))


if __name__ == "__main__":
    main()
