"""Unit tests of the scale benchmark's analysis, on made-up audit lines and objects (no cluster):

python3 -m unittest bench/test_scale_figures.py
"""

import datetime
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from keys import lone_by_timestamps, rejudge
from scale_figures import (
    audit_writes,
    lateness_by_timestamps,
    machine_cpu,
    percentiles,
    proc_stat_cpu,
    saturation,
    series_figures,
)
from tables import VERDICT_NOISE, VERDICT_RESOLVED, bill_figures, bill_goal, scale_bill, spread_verdict

T0 = 1_800_000_000.0  # a fixed wall-clock second
FINISH_AFTER = 180


def stamp(t):
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def audit_line(t, verb, name, group="", namespace="ns", code=201, stage="ResponseComplete"):
    """One audit entry at level Metadata, as kube-apiserver writes it."""
    return json.dumps(
        {
            "kind": "Event",
            "apiVersion": "audit.k8s.io/v1",
            "level": "Metadata",
            "stage": stage,
            "verb": verb,
            "objectRef": {"resource": "events", "namespace": namespace, "name": name, "apiGroup": group},
            "responseStatus": {"metadata": {}, "code": code},
            "stageTimestamp": stamp(t),
        }
    )


def raw_event(name, pod="p-00001", namespace="ns"):
    """A raw core/v1 Event as listed through the core API: kwok's BackOff of one Pod."""
    return {
        "metadata": {"namespace": namespace, "name": name},
        "involvedObject": {"kind": "Pod", "name": pod, "namespace": namespace, "fieldPath": "spec.containers{main}"},
        "reason": "BackOff",
        "source": {"component": "kubelet"},
    }


def series_object(name, first, last, state="Finished", pod="p-00001", namespace="ns"):
    return {
        "metadata": {"namespace": namespace, "name": name, "labels": {"eventseries.dev/state": state}},
        "regarding": {"kind": "Pod", "name": pod, "namespace": namespace, "fieldPath": "spec.containers{main}"},
        "reason": "BackOff",
        "reportingController": "kubelet",
        "eventTime": stamp(first),
        "series": {"count": 2, "lastObservedTime": stamp(last)},
    }


class AuditLog(unittest.TestCase):
    def test_only_successful_completed_event_writes_are_kept(self):
        lines = [
            audit_line(T0 + 2, "patch", "raw.1"),
            audit_line(T0 + 1, "create", "raw.1"),
            audit_line(T0 + 3, "patch", "raw.1", code=409),
            audit_line(T0 + 4, "patch", "raw.1", stage="ResponseStarted"),
            audit_line(T0 + 5, "delete", "raw.1", code=200),
            audit_line(T0 + 6, "create", "s.1", group="events.k8s.io"),
            json.dumps(
                {
                    "stage": "ResponseComplete",
                    "verb": "update",
                    "objectRef": {"resource": "leases", "namespace": "ns", "name": "l"},
                    "responseStatus": {"code": 200},
                    "stageTimestamp": stamp(T0),
                }
            ),
        ]
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "audit.log")
            with open(path, "w") as f:
                f.write("\n".join(lines) + "\n")
            with open(path) as f:
                writes = audit_writes(f)
        self.assertEqual(
            [(round(t - T0, 3), verb, group, obj) for t, verb, group, obj in writes],
            [
                (1.0, "create", "", ("ns", "raw.1")),
                (2.0, "patch", "", ("ns", "raw.1")),
                (6.0, "create", "events.k8s.io", ("ns", "s.1")),
            ],
        )


class Percentiles(unittest.TestCase):
    def test_nearest_rank(self):
        p = percentiles([float(i) for i in range(1, 101)])
        self.assertEqual(p, {"count": 100, "p50": 50.0, "p99": 99.0, "max": 100.0})

    def test_one_value_and_none(self):
        self.assertEqual(percentiles([2.5]), {"count": 1, "p50": 2.5, "p99": 2.5, "max": 2.5})
        self.assertIsNone(percentiles([]))

    def test_p99_of_few_values_is_the_largest(self):
        self.assertEqual(percentiles([3.0, 1.0, 2.0])["p99"], 3.0)


def figures(lines, raw, series, stopped_at=None):
    return series_figures(raw, series, audit_writes(lines), FINISH_AFTER, stopped_at)


class SeriesFigures(unittest.TestCase):
    """One BackOff loop: occurrences written at 0, 20, 40 and 90 s (one raw object, created then
    patched), its series created at 20.3 s, refreshed at 60 s, written Finished at 276 s."""

    def loop(self, finished_at=276.0, refreshed_at=60.0):
        lines = [
            audit_line(T0 + 0.0, "create", "raw.1"),
            audit_line(T0 + 20.0, "patch", "raw.1"),
            audit_line(T0 + 20.3, "create", "s.1", group="events.k8s.io"),
            audit_line(T0 + 40.0, "patch", "raw.1"),
            audit_line(T0 + refreshed_at, "patch", "s.1", group="events.k8s.io"),
            audit_line(T0 + 90.0, "patch", "raw.1"),
            audit_line(T0 + finished_at, "patch", "s.1", group="events.k8s.io"),
        ]
        # The raw object's timestamps are whole seconds, at or before its writes.
        return lines, [raw_event("raw.1")], [series_object("s.1", T0 - 0.4, T0 + 89.6)]

    def test_create_is_timed_from_the_second_occurrences_write(self):
        f = figures(*self.loop())
        self.assertEqual(f["create_s"]["count"], 1)
        self.assertAlmostEqual(f["create_s"]["p50"], 0.3, places=3)

    def test_refresh_waits_until_the_next_write_of_the_series(self):
        f = figures(*self.loop())
        # The occurrence at 40 s is shown by the refresh at 60 s; the one at 90 s only by the finish.
        self.assertEqual(f["refresh_s"], {"count": 1, "p50": 20.0, "p99": 20.0, "max": 20.0})
        self.assertEqual(f["occurrences_shown_only_by_the_finish"], 1)

    def test_finish_lateness_is_from_the_last_occurrences_write(self):
        lines, raw, series = self.loop()
        f = figures(lines, raw, series)
        # 276 - 90 - 180 = 6 s; no load stop given: counted under load.
        self.assertEqual(f["finish_lateness_s"]["loaded"]["max"], 6.0)
        self.assertIsNone(f["finish_lateness_s"]["quiet"])
        self.assertEqual(f["finish_lateness_s"]["all"]["count"], 1)

    def test_a_finish_due_after_the_load_stopped_is_quiet(self):
        lines, raw, series = self.loop()
        # Due at 90 + 180 = 270 s: the load stopped at 100 s, before it.
        f = figures(lines, raw, series, stopped_at=T0 + 100)
        self.assertEqual(f["finish_lateness_s"]["quiet"]["p99"], 6.0)
        self.assertIsNone(f["finish_lateness_s"]["loaded"])
        # Stopped after it was due: under load.
        f = figures(lines, raw, series, stopped_at=T0 + 300)
        self.assertEqual(f["finish_lateness_s"]["loaded"]["p99"], 6.0)

    def test_an_early_finish_is_negative_lateness(self):
        f = figures(*self.loop(finished_at=271.0))
        self.assertEqual(f["finish_lateness_s"]["all"]["p50"], 1.0)

    def test_writes_of_another_key_or_series_object_do_not_count(self):
        lines, raw, series = self.loop()
        lines += [
            # Another Pod's loop in the same namespace, written after this loop's last occurrence.
            audit_line(T0 + 200.0, "create", "raw.2"),
            audit_line(T0 + 210.0, "patch", "raw.2"),
            # A raw object nobody listed at the end (not an emitter's write of this key).
            audit_line(T0 + 220.0, "patch", "gone.1"),
        ]
        raw.append(raw_event("raw.2", pod="p-00002"))
        f = figures(lines, raw, series)
        self.assertEqual(f["finish_lateness_s"]["all"]["p50"], 6.0)

    def test_the_next_series_of_the_key_does_not_take_this_ones_occurrences(self):
        lines, raw, series = self.loop()
        # The loop resumes 10 minutes later: a new raw object and a second series object.
        lines += [
            audit_line(T0 + 600.0, "create", "raw.3"),
            audit_line(T0 + 615.0, "patch", "raw.3"),
            audit_line(T0 + 615.2, "create", "s.2", group="events.k8s.io"),
            audit_line(T0 + 798.0, "patch", "s.2", group="events.k8s.io"),
        ]
        raw.append(raw_event("raw.3"))
        series.append(series_object("s.2", T0 + 599.5, T0 + 614.5))
        f = figures(lines, raw, series)
        self.assertEqual(f["create_s"]["count"], 2)
        self.assertAlmostEqual(f["create_s"]["max"], 0.3, places=3)
        # s.1: 276 - 90 - 180; s.2: 798 - 615 - 180.
        self.assertEqual(f["finish_lateness_s"]["all"], {"count": 2, "p50": 3.0, "p99": 6.0, "max": 6.0})

    def test_an_ongoing_series_has_no_finish(self):
        lines, raw, series = self.loop()
        series[0]["metadata"]["labels"]["eventseries.dev/state"] = "Ongoing"
        f = figures(lines, raw, series)
        self.assertIsNone(f["finish_lateness_s"]["all"])
        # Its last write is a heartbeat like any other: the occurrence before it is a refresh.
        self.assertEqual(f["refresh_s"]["count"], 2)

    def test_a_series_without_emitter_writes_is_counted_apart(self):
        lines, raw, series = self.loop()
        # Without AUDIT_CORE_EVENTS only the series' own writes are in the log.
        lines = [line for line in lines if '"apiGroup": "events.k8s.io"' in line]
        f = figures(lines, raw, series)
        self.assertEqual(f["series_without_writes_seen"], 1)
        self.assertIsNone(f["create_s"])

    def test_the_earlier_measure_starts_at_the_events_timestamp(self):
        lines, _raw, series = self.loop()
        late = lateness_by_timestamps(series, audit_writes(lines), FINISH_AFTER)
        # 276 - 89.6 - 180
        self.assertEqual(late, {"series": 1, "p50": 6.4, "p99": 6.4, "max": 6.4})


class Saturation(unittest.TestCase):
    def test_machine_cpu_shares(self):
        before = proc_stat_cpu("cpu  100 0 100 700 0 0 0 100 0 0\ncpu0 1 2 3 4\n")
        after = proc_stat_cpu("cpu  200 0 200 1300 50 0 0 200 7 0\n")
        # 100 + 100 + 600 + 50 + 100 = 950 ticks
        self.assertEqual(
            machine_cpu(before, after), {"idle_percent": 63.2, "iowait_percent": 5.3, "steal_percent": 10.5}
        )
        self.assertIsNone(machine_cpu(before, None))

    def test_apf_rejections_and_429s(self):
        before = {
            'apiserver_flowcontrol_rejected_requests_total{flow_schema="service-accounts",priority_level="workload-low",reason="queue-full"}': 2,
            'apiserver_request_total{code="429",component="apiserver",group="",resource="events",verb="POST"}': 1,
        }
        after = {
            'apiserver_flowcontrol_rejected_requests_total{flow_schema="service-accounts",priority_level="workload-low",reason="queue-full"}': 7,
            'apiserver_flowcontrol_rejected_requests_total{flow_schema="global-default",priority_level="global-default",reason="time-out"}': 1,
            'apiserver_request_total{code="429",component="apiserver",group="",resource="events",verb="POST"}': 4,
            'apiserver_request_total{code="201",component="apiserver",group="",resource="events",verb="POST"}': 90,
        }
        self.assertEqual(
            saturation(before, after),
            {
                "apf_rejected": 6,
                "apf_rejected_by": {"global-default time-out": 1, "workload-low queue-full": 5},
                "status_429": 3,
            },
        )


class Bill(unittest.TestCase):
    def test_resolved_only_beyond_the_spread_of_the_runs_without(self):
        v = spread_verdict([30.0, 32.0, 31.0], [36.0, 35.0])
        self.assertEqual(v["verdict"], VERDICT_RESOLVED)
        self.assertAlmostEqual(v["difference"], 4.5)
        self.assertAlmostEqual(v["spread_without"], 2.0)
        self.assertEqual(v["without"], {"runs": 3, "mean": 31.0, "min": 30.0, "max": 32.0})
        # The same difference inside a wider spread without.
        self.assertEqual(spread_verdict([27.0, 35.0, 31.0], [36.0, 35.0])["verdict"], VERDICT_NOISE)
        # Equal to the spread is not beyond it; a fall counts as well as a rise.
        self.assertEqual(spread_verdict([30.0, 32.0], [33.0, 33.0])["verdict"], VERDICT_NOISE)
        self.assertEqual(spread_verdict([30.0, 32.0], [25.0, 26.0])["verdict"], VERDICT_RESOLVED)

    def test_one_run_on_a_side_resolves_nothing(self):
        self.assertEqual(spread_verdict([30.0], [40.0, 41.0])["verdict"], VERDICT_NOISE)
        self.assertEqual(spread_verdict([30.0, 30.5], [40.0])["verdict"], VERDICT_NOISE)

    def test_a_missing_figure_has_no_verdict(self):
        self.assertIsNone(spread_verdict([None, None], [1.0]))
        self.assertIsNone(spread_verdict([], []))
        self.assertEqual(spread_verdict([1.0, None, 3.0], [5.0, 5.0])["without"]["runs"], 2)

    def test_the_cpu_goal_is_judged_only_as_far_as_the_spread_allows(self):
        # Resolved: the difference decides, either way.
        self.assertEqual(bill_goal(spread_verdict([30.0, 31.0], [36.0, 35.0])), "**missed**")
        self.assertEqual(bill_goal(spread_verdict([30.0, 30.5], [32.0, 32.5])), "met")
        # Not resolved: met only when the noise that hides the difference is itself within the goal.
        self.assertEqual(bill_goal(spread_verdict([30.0, 32.0], [31.5, 31.0])), "met (inside a spread of 6.5 %)")
        self.assertEqual(bill_goal(spread_verdict([28.0, 37.0], [36.0, 35.0])), "cannot be judged on this machine")
        self.assertEqual(bill_goal(spread_verdict([30.0, 30.5], [31.0])), "cannot be judged on this machine")

    def test_the_table_renders_new_and_old_bills(self):
        run = lambda cpu, rss: {
            "apiserver_cpu_percent": cpu,
            "apiserver_rss_mib": rss,
            "etcd_cpu_percent": 9.0,
            "requests_total": 1000,
            "etcd_writes": 500,
            "watch_bytes_per_occurrence": 10.0,
            "events_requests": {"POST core/events": 100, "PATCH core/events": 300},
            "lease_requests": 50,
        }
        runs = {
            "bill-without-1": run(30.0, 500.0),
            "bill-with-1": run(36.0, 520.0),
            "bill-without-2": run(32.0, 502.0),
            "bill-with-2": run(35.0, 521.0),
        }
        text = scale_bill({"bill": {"runs": runs, "figures": bill_figures([], [])}})
        self.assertIn(
            "| API server CPU (% of one core) | 31.0 (30.0–32.0) | 35.5 (35.0–36.0) | +4.5 (+14.5 %) | **resolved**; goal ≤ +10 %: **missed** |",
            text,
        )
        self.assertIn(
            "| API requests | 1,000 (1,000–1,000) | 1,000 (1,000–1,000) | +0 (+0.0 %) | cannot be resolved", text
        )
        self.assertIn("| occurrences (raw Event writes through core/v1) | 400 (400–400) | 400 (400–400) |", text)
        # The operator labels early refreshes "heartbeat": they are counted, and a file of before that
        # also says "refresh" (always 0) counts the same.
        held = {"writes": {"create": 1100, "heartbeat": 3300, "finish": 1101}}
        runs["bill-with-1"]["operator_in_window"] = held
        runs["bill-with-2"]["operator_in_window"] = {"writes": {**held["writes"], "refresh": 0}}
        text = scale_bill({"bill": {"runs": runs}})
        self.assertIn("| 1,100 / 3,300 / 1,101 |", text)
        text = scale_bill({"bill": {"runs": runs}, "flags": {"policy": "finishAfter 180s, firstRefresh 0"}})
        self.assertIn("| finishAfter 180s, firstRefresh 0 |", text)
        # A bill of before the pairs: without-1, with, without-2 and a ratio beside them.
        old = {"bill-without-1": runs["bill-without-1"], "bill-with": runs["bill-with-1"]}
        old["bill-without-2"] = {k: v for k, v in runs["bill-without-2"].items() if k != "apiserver_rss_mib"}
        old["apiserver_cpu_with_over_without"] = 1.16
        text = scale_bill({"bill": old})
        self.assertIn("with: mean (min–max) of 1 run |", text)
        self.assertIn("(2 runs without, 1 run with)", text)
        # RSS of one run without only: a figure, and no verdict.
        self.assertIn("| API server RSS, mean over the window (MiB) | 500.0 | 520.0 | +20.0 (+4.0 %) | cannot", text)


if __name__ == "__main__":
    unittest.main()


def one_object_key(raw_span, series_span, writes):
    """A key of one raw object and one series object, as bench/scale.py keeps a "differs" row:
    spans are (first, last, count)."""
    return {
        "raw": raw_span[2],
        "raw_objects": 1,
        "series": series_span[2],
        "series_objects": 1,
        "raw_spans": [list(raw_span)],
        "series_spans": [list(series_span)],
        "writes": writes,
    }


class AloneByTimestamps(unittest.TestCase):
    """The operator times an occurrence by its own timestamp: a starved emitter's late write can put
    two occurrences less than seriesWindow apart by their writes and more by their timestamps."""

    def test_a_last_occurrence_further_than_the_window_from_the_series_stood_alone(self):
        self.assertEqual(lone_by_timestamps((0, 400, 9), [(0, 210, 8)], 180), 1)
        self.assertEqual(lone_by_timestamps((0, 380, 9), [(0, 210, 8)], 180), 0)

    def test_a_first_occurrence_further_than_the_window_before_the_series_stood_alone(self):
        self.assertEqual(lone_by_timestamps((0, 260, 3), [(187, 260, 2)], 180), 1)

    def test_two_occurrences_further_apart_than_the_window_make_no_series(self):
        self.assertEqual(lone_by_timestamps((0, 200, 2), [], 180), 2)
        self.assertEqual(lone_by_timestamps((0, 170, 2), [], 180), 0)

    def test_a_key_judged_differs_by_its_writes_is_exact_by_its_timestamps(self):
        # Written 169 s apart, stamped 189 s apart: the last occurrence stood alone.
        row = one_object_key(
            ("2026-11-29T01:10:06Z", "2026-11-29T01:16:53Z", 9),
            ("2026-11-29T01:10:06.000000Z", "2026-11-29T01:13:44.000000Z", 8),
            [0, 10, 20, 30, 40, 50, 60, 856.5, 1025.7],
        )
        self.assertEqual(rejudge(row, 180), "exact, lone by design")
        row["raw_spans"] = [["2026-11-29T01:10:06Z", "2026-11-29T01:16:33Z", 9]]
        self.assertEqual(rejudge(row, 180), "differs", "169 s by both: one occurrence lost")

    def test_writes_late_past_the_window_do_not_add_to_the_timestamps_account(self):
        # A kwok loop of 2026-11-30: the third occurrence stamped 01:01:06, within the window of the
        # second, but written 42 s late, 184 s after the second's write. By the timestamps one
        # occurrence (the last) stood alone, by the writes two: the larger count called it short.
        row = one_object_key(
            ("2026-11-30T00:57:38Z", "2026-11-30T01:04:30Z", 4),
            ("2026-11-30T00:57:38.000000Z", "2026-11-30T01:01:06.000000Z", 3),
            [262.1, 324.9, 508.1, 694.3],
        )
        self.assertEqual(rejudge(row, 180), "exact, lone by design")
        row["series"] = 1
        self.assertEqual(rejudge(row, 180), "differs", "two lone by the writes, one by the stamps: not three")
        row["series"], row["writes"] = 3, [262.1, 324.9, 400.0, 694.3]
        row["series_spans"] = [["2026-11-30T00:57:38.000000Z", "2026-11-30T01:04:30.000000Z", 3]]
        self.assertEqual(rejudge(row, 180), "exact, lone by design", "by the writes alone")


class ScriptSettings(unittest.TestCase):
    """bench/scale.sh's own settings, through its dry run: where it writes, what policy it applies."""

    def dry_run(self, **env):
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scale.sh")
        keep = {k: v for k, v in os.environ.items() if k not in ("WATCH_CACHE", "FIRST_REFRESH")}
        done = subprocess.run(
            ["bash", script],
            env={**keep, **env, "SCALE_DRY_RUN": "1"},
            capture_output=True,
            text=True,
            check=False,
        )
        self.assertEqual(done.returncode, 0, done.stderr)
        return done.stdout

    def test_defaults_run(self):
        out = self.dry_run()
        self.assertRegex(out, r"out: .*/bench/results/scale/\d{8}T\d{6}Z\n")
        self.assertIn("spec: {finishAfter: 180s, seriesWindow: 180s}\n", out)

    def test_first_refresh_zero_is_a_string(self):
        out = self.dry_run(FIRST_REFRESH="0", WATCH_CACHE="on")
        self.assertRegex(out, r"out: .*/bench/results/scale-watch-cache-first-refresh-0/")
        self.assertIn("firstRefresh: '0'}", out, "a bare 0 is an integer the CRD refuses")
