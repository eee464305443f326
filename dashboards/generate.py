#!/usr/bin/env python3
"""Writes dashboards/statestore-overview.json and dashboards/statestore-details.json.

The committed JSON is what Grafana loads; this script only keeps the two dashboards
consistent (same variables, selectors, datasource reference, units and threshold style).
Run it after editing, then `scripts/check-dashboards.sh` (schema) and
`cargo test -p statestore-tests --test t96_dashboards` (every query against a live cluster).

    python3 dashboards/generate.py          # rewrite both files
    python3 dashboards/generate.py --check  # exit 1 if the committed files differ
"""

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCHEMA_VERSION = 39
DS = {"type": "prometheus", "uid": "${datasource}"}
# Every series selector of every query carries this.
SEL = 'job=~"$job", instance=~"$instance"'
RATE = "$__rate_interval"

GREEN, YELLOW, ORANGE, RED, BLUE = "green", "yellow", "orange", "red", "blue"


def steps(*pairs):
    """Threshold steps: steps(GREEN, (0.1, ORANGE), (0.5, RED)); the first has value null."""
    base, *rest = pairs
    out = [{"color": base, "value": None}]
    out += [{"color": color, "value": value} for value, color in rest]
    return {"mode": "absolute", "steps": out}


def target(expr, legend, ref, instant=False):
    t = {
        "datasource": DS,
        "editorMode": "code",
        "expr": expr,
        "legendFormat": legend,
        "range": not instant,
        "refId": ref,
    }
    if instant:
        t["instant"] = True
    return t


class Layout:
    """Places panels left to right on Grafana's 24-column grid, wrapping to a new line."""

    def __init__(self):
        self.x, self.y, self.line_h, self.next_id = 0, 0, 0, 1
        self.panels = []

    def _pos(self, w, h):
        if self.x + w > 24:
            self.x, self.y, self.line_h = 0, self.y + self.line_h, 0
        pos = {"h": h, "w": w, "x": self.x, "y": self.y}
        self.x += w
        self.line_h = max(self.line_h, h)
        return pos

    def _id(self):
        self.next_id += 1
        return self.next_id - 1

    def row(self, title):
        if self.x:
            self.x, self.y, self.line_h = 0, self.y + self.line_h, 0
        self.panels.append(
            {
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y},
                "id": self._id(),
                "panels": [],
                "title": title,
                "type": "row",
            }
        )
        self.y += 1

    def _panel(self, kind, title, description, queries, unit, thresholds, w, h, options, custom,
               mappings=None, minimum=None, decimals=None):
        assert description, title
        assert queries, title
        defaults = {
            "color": {"mode": "thresholds" if kind in ("stat", "gauge") else "palette-classic"},
            "mappings": mappings or [],
            "thresholds": thresholds,
            "unit": unit,
        }
        if custom is not None:
            defaults["custom"] = custom
        if minimum is not None:
            defaults["min"] = minimum
        if decimals is not None:
            defaults["decimals"] = decimals
        refs = "ABCDEFGH"
        self.panels.append(
            {
                "datasource": DS,
                "description": description,
                "fieldConfig": {"defaults": defaults, "overrides": []},
                "gridPos": self._pos(w, h),
                "id": self._id(),
                "options": options,
                "targets": [
                    target(expr, legend, refs[i], instant=kind in ("stat", "gauge"))
                    for i, (expr, legend) in enumerate(queries)
                ],
                "title": title,
                "type": kind,
            }
        )

    def timeseries(self, title, description, queries, unit, thresholds, w=8, h=8,
                   show_thresholds=True, stack=False, minimum=0, log=False):
        custom = {
            "scaleDistribution": {"type": "log", "log": 10} if log else {"type": "linear"},
            "drawStyle": "line",
            "fillOpacity": 10,
            "lineWidth": 1,
            "showPoints": "never",
            "spanNulls": False,
            "stacking": {"group": "A", "mode": "normal" if stack else "none"},
            "thresholdsStyle": {"mode": "line+area" if show_thresholds else "off"},
        }
        options = {
            "legend": {"calcs": ["lastNotNull", "max"], "displayMode": "table", "placement": "bottom",
                       "showLegend": True, "sortBy": "Max", "sortDesc": True},
            "tooltip": {"mode": "multi", "sort": "desc"},
        }
        self._panel("timeseries", title, description, queries, unit, thresholds, w, h, options,
                    custom, minimum=None if log else minimum)

    def stat(self, title, description, queries, unit, thresholds, w=4, h=4, mappings=None,
             decimals=None, text_mode="value_and_name"):
        options = {
            "colorMode": "background",
            "graphMode": "none",
            "justifyMode": "auto",
            "orientation": "auto",
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "textMode": text_mode,
        }
        self._panel("stat", title, description, queries, unit, thresholds, w, h, options, None,
                    mappings=mappings, decimals=decimals)

    def gauge(self, title, description, queries, unit, thresholds, w=4, h=4):
        options = {
            "orientation": "auto",
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "showThresholdLabels": False,
            "showThresholdMarkers": True,
        }
        self._panel("gauge", title, description, queries, unit, thresholds, w, h, options, None,
                    minimum=0)


def variables():
    def query_var(name, label, query):
        return {
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
            "datasource": DS,
            "includeAll": True,
            "label": label,
            "multi": True,
            "name": name,
            "options": [],
            "query": query,
            "refresh": 2,
            "regex": "",
            "sort": 1,
            "type": "query",
        }

    return {
        "list": [
            {
                "current": {"selected": False, "text": "Prometheus", "value": "prometheus"},
                "hide": 0,
                "includeAll": False,
                "label": "Data source",
                "multi": False,
                "name": "datasource",
                "options": [],
                "query": "prometheus",
                "refresh": 1,
                "regex": "",
                "type": "datasource",
            },
            query_var("job", "Job", "label_values(statestore_build_info, job)"),
            query_var("instance", "Instance", 'label_values(statestore_build_info{job=~"$job"}, instance)'),
        ]
    }


def dashboard(uid, title, description, panels, tags, links):
    return {
        "annotations": {
            "list": [
                {
                    "builtIn": 1,
                    "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                    "enable": True,
                    "hide": True,
                    "iconColor": "rgba(0, 211, 255, 1)",
                    "name": "Annotations & Alerts",
                    "type": "dashboard",
                },
            ]
        },
        "description": description,
        "editable": True,
        "fiscalYearStartMonth": 0,
        "graphTooltip": 1,
        "links": links,
        "panels": panels,
        "refresh": "30s",
        "schemaVersion": SCHEMA_VERSION,
        "tags": tags,
        "templating": variables(),
        "time": {"from": "now-1h", "to": "now"},
        "timepicker": {},
        "timezone": "",
        "title": title,
        "uid": uid,
        "version": 1,
        "weekStart": "",
    }


def link(title, uid):
    return {
        "asDropdown": False,
        "icon": "dashboard",
        "includeVars": True,
        "keepTime": True,
        "tags": [],
        "targetBlank": False,
        "title": title,
        "tooltip": "",
        "type": "link",
        "url": f"/d/{uid}",
    }


def hq(q, metric, by):
    """histogram_quantile over rate() of `metric`'s buckets, grouped by `by` (plus le)."""
    group = ", ".join([*by, "le"])
    return f"histogram_quantile({q}, sum by ({group}) (rate({metric}_bucket{{{SEL}}}[{RATE}])))"


def overview():
    d = Layout()
    role = [
        {"type": "value", "options": {"0": {"text": "follower", "color": BLUE, "index": 0},
                                      "1": {"text": "LEADER", "color": GREEN, "index": 1}}}
    ]
    d.stat("Leaders", "Members that are Raft leader, summed per job. Exactly 1 is healthy; 0 means no "
           "request is answered (alert StatestoreNoLeader); 2 can only be a stale member.",
           [(f"sum by (job) (statestore_server_is_leader{{{SEL}}})", "{{job}}")], "none",
           steps(RED, (1, GREEN), (2, RED)), w=2, decimals=0)
    d.stat("Leader id", "Raft id of the leader, as the best-informed member knows it (0: none known).",
           [(f"max by (job) (statestore_server_current_leader_id{{{SEL}}})", "{{job}}")], "none",
           steps(RED, (1, GREEN)), w=2, decimals=0,
           mappings=[{"type": "value", "options": {"0": {"text": "none", "color": RED, "index": 0}}}])
    d.stat("Role by member", "Which member leads: LEADER or follower per scraped instance.",
           [(f"max by (instance) (statestore_server_is_leader{{{SEL}}})", "{{instance}}")], "none",
           steps(BLUE, (1, GREEN)), w=6, mappings=role)
    d.stat("Members up", "Members Prometheus scrapes successfully. A cluster of 3 tolerates 1 down, "
           "not 2 (alert StatestoreMemberDown).",
           [(f"sum by (job) (up{{{SEL}}})", "{{job}}")], "none",
           steps(RED, (2, ORANGE), (3, GREEN)), w=3, decimals=0)
    d.stat("Subscription holders", "Members holding the MQTT request subscription, summed. Must be exactly "
           "1: 0 means the broker drops requests, 2 means two members answer.",
           [(f"sum by (job) (statestore_mqtt_request_subscription_active{{{SEL}}})", "{{job}}")], "none",
           steps(RED, (1, GREEN), (2, RED)), w=3, decimals=0)
    d.gauge("Quota used", "max(keys / key quota, bytes / byte quota, registrations / registration quota) of the replicated keyspace. "
            "Writes are refused at 100 % (alerts at 80 % and 95 %).",
            [(f"max by (job) (statestore_keyspace_quota_used_ratio{{{SEL}}})", "{{job}}")], "percentunit",
            steps(GREEN, (0.8, ORANGE), (0.95, RED)), w=3)
    d.stat("Leader changes (range)", "Leader changes seen during the dashboard's time range (the most any member saw). "
           "4 or more in 15 min raises StatestoreFrequentLeaderChanges.",
           [(f"max by (job) (round(increase(statestore_server_leader_changes_seen_total{{{SEL}}}[$__range])))",
             "{{job}}")], "none", steps(GREEN, (2, ORANGE), (4, RED)), w=3, decimals=0)
    d.stat("Term", "Current Raft term (highest of the members). Each election increments it.",
           [(f"max by (job) (statestore_raft_term{{{SEL}}})", "{{job}}")], "none", steps(BLUE), w=2,
           decimals=0)

    d.timeseries("Requests by command and result", "Answered requests per second by command and result "
                 "(ok, not_found, not_applied are normal replies; everything else is an error).",
                 [(f"sum by (command, result) (rate(statestore_server_requests_total{{{SEL}}}[{RATE}]))",
                   "{{command}} {{result}}")], "reqps", steps(GREEN), w=12, show_thresholds=False, stack=True)
    d.timeseries("Latency p50 / p99 by command", "Time from receiving a request to queueing its reply. "
                 "Line at 100 ms: a write normally needs one fsync round on a quorum.",
                 [(hq(0.5, "statestore_server_request_duration_seconds", ["command"]), "p50 {{command}}"),
                  (hq(0.99, "statestore_server_request_duration_seconds", ["command"]), "p99 {{command}}")],
                 "s", steps(GREEN, (0.1, ORANGE), (1, RED)), w=12)
    d.timeseries("Error replies by result", "Requests answered with -ERR (or not_leader/overloaded/timed_out/"
                 "internal), per second by result label. Above 5 % of all replies for 10 min raises "
                 "StatestoreHighErrorReplyRatio.",
                 [(f'sum by (result) (rate(statestore_server_requests_total{{{SEL}, result!~"ok|not_found|not_applied"}}[{RATE}]))',
                   "{{result}}")], "reqps", steps(GREEN, (1, ORANGE), (10, RED)), w=8)
    d.timeseries("Dropped requests by reason", "Requests that got no reply at all, per second by reason "
                 "(overloaded or timed_out above 1/s raises StatestoreRequestsDropped).",
                 [(f"sum by (reason) (rate(statestore_server_requests_dropped_total{{{SEL}}}[{RATE}]))",
                   "{{reason}}")], "reqps", steps(GREEN, (1, RED)), w=8)
    d.timeseries("Commit-to-apply lag", "Log entries written but not applied yet, per member "
                 "(last log index - applied index). Above 10 000 for 5 min raises StatestoreHighApplyLag.",
                 [(f"statestore_raft_last_log_index{{{SEL}}} - statestore_raft_applied_index{{{SEL}}}",
                   "{{instance}}")], "short", steps(GREEN, (1000, ORANGE), (10000, RED)), w=8)
    d.timeseries("Keys against quota", "Keys stored (replicated: every member reports the same) and the key "
                 "quota (limits.max_keys), on a log scale.",
                 [(f"max by (job) (statestore_keyspace_keys{{{SEL}}})", "keys"),
                  (f"max by (job) (statestore_keyspace_quota_limit_keys{{{SEL}}})", "quota")],
                 "short", steps(GREEN), w=8, show_thresholds=False, log=True)
    d.timeseries("Bytes against quota", "Key and value bytes stored and the byte quota (limits.max_bytes), "
                 "on a log scale.",
                 [(f"max by (job) (statestore_keyspace_size_bytes{{{SEL}}})", "stored"),
                  (f"max by (job) (statestore_keyspace_quota_limit_bytes{{{SEL}}})", "quota")],
                 "bytes", steps(GREEN), w=8, show_thresholds=False, log=True)
    d.timeseries("Failovers: term and leader", "Raft term (steps up at each election) and the leader's id; "
                 "a step is a failover.",
                 [(f"max by (job) (statestore_raft_term{{{SEL}}})", "term"),
                  (f"max by (job) (statestore_server_current_leader_id{{{SEL}}})", "leader id")],
                 "none", steps(BLUE), w=8, show_thresholds=False)
    return dashboard("statestore-overview", "statestore / Overview",
                     "Is the cluster serving? Leader, members, request rate and latency, errors, quota, "
                     "apply lag and failovers.", d.panels, ["statestore"],
                     [link("statestore / Details", "statestore-details")])


def details():
    d = Layout()
    d.row("Raft")
    d.timeseries("Log fsync duration p50 / p99", "fdatasync of the Raft log per member (one fsync covers every "
                 "append queued meanwhile). p99 above 100 ms for 10 min raises StatestoreHighFsyncDurations.",
                 [(hq(0.5, "statestore_disk_log_fsync_duration_seconds", ["instance"]), "p50 {{instance}}"),
                  (hq(0.99, "statestore_disk_log_fsync_duration_seconds", ["instance"]), "p99 {{instance}}")],
                 "s", steps(GREEN, (0.05, ORANGE), (0.1, RED)))
    d.timeseries("Log append duration p99", "Writing a batch of entries to the log before the fsync.",
                 [(hq(0.99, "statestore_disk_log_append_duration_seconds", ["instance"]), "{{instance}}")],
                 "s", steps(GREEN, (0.01, ORANGE), (0.05, RED)))
    d.timeseries("Peer RPCs sent by kind", "Raft RPCs written to peers per second (append, heartbeat, vote, "
                 "pre_vote, snapshot, transfer_leader). Votes outside a failover mean unstable leadership.",
                 [(f"sum by (kind) (rate(statestore_raft_rpcs_sent_total{{{SEL}}}[{RATE}]))", "{{kind}}")],
                 "ops", steps(GREEN), show_thresholds=False)
    d.timeseries("Snapshot duration p99", "Building (op=build) or installing (op=install) a snapshot. "
                 "No line until a member has done one.",
                 [(hq(0.99, "statestore_disk_snapshot_duration_seconds", ["op"]), "{{op}}")],
                 "s", steps(GREEN, (5, ORANGE), (30, RED)))
    d.timeseries("Log size on disk", "Raft log (WAL chunks) per member; it shrinks when entries behind a "
                 "snapshot are purged.",
                 [(f"statestore_disk_log_size_bytes{{{SEL}}}", "{{instance}}")], "bytes",
                 steps(GREEN, (1e9, ORANGE), (4e9, RED)))
    d.timeseries("Log written", "Bytes of encoded entries appended to the log per second.",
                 [(f"sum by (instance) (rate(statestore_disk_log_written_bytes_total{{{SEL}}}[{RATE}]))",
                   "{{instance}}")], "Bps", steps(GREEN), show_thresholds=False)
    d.timeseries("Snapshot and purged index", "Last index covered by the snapshot and last purged log index, "
                 "per member.",
                 [(f"statestore_raft_snapshot_index{{{SEL}}}", "snapshot {{instance}}"),
                  (f"statestore_raft_purged_index{{{SEL}}}", "purged {{instance}}")],
                 "short", steps(GREEN), show_thresholds=False)
    d.timeseries("Slow log flushes", "Log appends that took over 50 ms from hand-over to fdatasync, per "
                 "member (increase per interval).",
                 [(f"sum by (instance) (increase(statestore_disk_log_slow_flushes_total{{{SEL}}}[{RATE}]))",
                   "{{instance}}")], "short", steps(GREEN, (1, ORANGE), (10, RED)))
    d.timeseries("Leadership duty changes", "Request-subscription take-overs and releases by reason "
                 "(not_leader, new_term, quorum_lost), increase per interval.",
                 [(f"sum by (job) (increase(statestore_leader_takeovers_total{{{SEL}}}[{RATE}]))", "takeovers"),
                  (f"sum by (reason) (increase(statestore_leader_releases_total{{{SEL}}}[{RATE}]))",
                   "release {{reason}}")], "short", steps(GREEN, (1, ORANGE)))
    d.timeseries("Raft role by member", "1 for the role each member is in.",
                 [(f"sum by (state) (statestore_raft_state{{{SEL}}})", "{{state}}")], "short",
                 steps(GREEN), show_thresholds=False)
    d.timeseries("Quorum acknowledgement age", "On the serving leader: time since a quorum last acknowledged "
                 "it (0 elsewhere). Past the maximum election timeout (500 ms default) it steps down.",
                 [(f"max by (instance) (statestore_leader_quorum_ack_age_seconds{{{SEL}}})", "{{instance}}")],
                 "s", steps(GREEN, (0.25, ORANGE), (0.5, RED)))
    d.timeseries("Last log and applied index", "Per member; followers track the leader closely.",
                 [(f"statestore_raft_last_log_index{{{SEL}}}", "last {{instance}}"),
                  (f"statestore_raft_applied_index{{{SEL}}}", "applied {{instance}}")],
                 "short", steps(GREEN), show_thresholds=False)

    d.row("Storage")
    d.timeseries("State database size", "State database (fjall: journals and table files) on disk, per member.",
                 [(f"statestore_disk_db_size_bytes{{{SEL}}}", "{{instance}}")], "bytes",
                 steps(GREEN, (4e9, ORANGE), (16e9, RED)))
    d.timeseries("Apply commit duration p50 / p99", "Applying a batch of committed entries to the state machine.",
                 [(hq(0.5, "statestore_disk_apply_commit_duration_seconds", ["instance"]), "p50 {{instance}}"),
                  (hq(0.99, "statestore_disk_apply_commit_duration_seconds", ["instance"]), "p99 {{instance}}")],
                 "s", steps(GREEN, (0.05, ORANGE), (0.25, RED)))
    d.timeseries("Memtable", "Applied writes (and the reply memory's changes) held in memory before a background "
                 "flush moves them into the state database (a layer every 16 MiB of writes, 64 MiB of reply-memory "
                 "changes or 15 s), per member. Applies wait at 192 MiB.",
                 [(f"statestore_disk_memtable_bytes{{{SEL}}}", "{{instance}}")], "bytes",
                 steps(GREEN, (128 * 2**20, ORANGE), (176 * 2**20, RED)))
    d.timeseries("Memtable stalls", "Applies that waited because the memtable was full while a flush ran "
                 "(increase per interval); any is worth a look at disk latency.",
                 [(f"sum by (instance) (increase(statestore_disk_memtable_stalls_total{{{SEL}}}[{RATE}]))",
                   "{{instance}}")], "short", steps(GREEN, (1, ORANGE), (10, RED)), w=12)
    d.timeseries("Disk errors", "Failed storage operations (increase per interval). Any stops Raft on that "
                 "member, which exits (alert StatestoreDiskErrors). Damaged snapshot: a snapshot the member "
                 "wrote for a peer that the peer refused as corrupt, replaced by a new export (alert "
                 "StatestoreSnapshotDamaged).",
                 [(f"sum by (instance) (increase(statestore_disk_errors_total{{{SEL}}}[{RATE}]))", "{{instance}}"),
                  (f"sum by (instance) (increase(statestore_disk_snapshot_own_corrupt_total{{{SEL}}}[{RATE}]))",
                   "damaged snapshot {{instance}}")],
                 "short", steps(GREEN, (1, RED)), w=12)

    d.row("Expiry")
    d.timeseries("Sweep duration p50 / p99", "One expiry sweep: scan, propose, apply.",
                 [(hq(0.5, "statestore_expiry_sweep_duration_seconds", ["instance"]), "p50 {{instance}}"),
                  (hq(0.99, "statestore_expiry_sweep_duration_seconds", ["instance"]), "p99 {{instance}}")],
                 "s", steps(GREEN, (0.25, ORANGE), (1, RED)))
    d.timeseries("Keys expired", "Keys removed by expiry per second, per member.",
                 [(f"sum by (instance) (rate(statestore_expiry_keys_expired_total{{{SEL}}}[{RATE}]))",
                   "{{instance}}")], "ops", steps(GREEN), show_thresholds=False)
    d.timeseries("Keys due", "Keys past their expiry not yet removed (counted up to one sweep batch). Not "
                 "zero for 15 min on the leader raises StatestoreExpiryBacklog.",
                 [(f"statestore_expiry_due_keys{{{SEL}}}", "{{instance}}")], "short",
                 steps(GREEN, (1, ORANGE), (1000, RED)))

    d.row("Notifications")
    d.timeseries("Registrations", "KEYNOTIFY registrations stored, all clients together (replicated).",
                 [(f"max by (job) (statestore_keyspace_registrations{{{SEL}}})", "registrations")], "short",
                 steps(GREEN, (800000, ORANGE), (1000000, RED)), w=6)
    d.timeseries("Notifications sent by op", "Key notifications published per second (set, delete).",
                 [(f"sum by (op) (rate(statestore_notify_sent_total{{{SEL}}}[{RATE}]))", "{{op}}")], "ops",
                 steps(GREEN), w=6, show_thresholds=False)
    d.timeseries("Notifications dropped", "Notifications not published, by reason, and clients forgotten "
                 "after PUBACK 0x10 (increase per interval). Any drop raises StatestoreNotificationsDropped.",
                 [(f"sum by (reason) (increase(statestore_notify_dropped_total{{{SEL}}}[{RATE}]))", "{{reason}}"),
                  (f"sum by (job) (increase(statestore_notify_clients_forgotten_total{{{SEL}}}[{RATE}]))",
                   "clients forgotten")], "short", steps(GREEN, (1, RED)), w=6)
    d.timeseries("Notifications pending", "Notifications queued for publishing, per member.",
                 [(f"statestore_notify_pending{{{SEL}}}", "{{instance}}")], "short",
                 steps(GREEN, (1000, ORANGE), (10000, RED)), w=6)

    d.row("MQTT and request path")
    d.stat("Broker connection", "Per member: connected to the broker or not (alert "
           "StatestoreMqttDisconnected).",
           [(f'max by (instance) (statestore_mqtt_connection_state{{{SEL}, state="connected"}})', "{{instance}}")],
           "none", steps(RED, (1, GREEN)), w=8,
           mappings=[{"type": "value", "options": {"0": {"text": "DOWN", "color": RED, "index": 0},
                                                   "1": {"text": "connected", "color": GREEN, "index": 1}}}])
    d.stat("Request-subscription holders", "Members holding the request subscription, summed over the cluster. "
           "Exactly 1 is healthy (alert StatestoreRequestSubscriptionHolders).",
           [(f"sum by (job) (statestore_mqtt_request_subscription_active{{{SEL}}})", "{{job}}")], "none",
           steps(RED, (1, GREEN), (2, RED)), w=4, decimals=0)
    d.stat("Subscription by member", "1 on the member that holds the request subscription.",
           [(f"max by (instance) (statestore_mqtt_request_subscription_active{{{SEL}}})", "{{instance}}")],
           "none", steps(BLUE, (1, GREEN)), w=12, decimals=0)
    d.timeseries("Messages in / out", "Requests received from the broker per member, and QoS 1 publishes "
                 "sent by kind (response, notification).",
                 [(f"sum by (instance) (rate(statestore_mqtt_messages_received_total{{{SEL}}}[{RATE}]))",
                   "in {{instance}}"),
                  (f"sum by (kind) (rate(statestore_mqtt_messages_sent_total{{{SEL}}}[{RATE}]))", "out {{kind}}")],
                 "ops", steps(GREEN), show_thresholds=False)
    d.timeseries("Reconnects and publish failures", "Connection attempts by result, connections lost, and "
                 "publishes dropped by kind (increase per interval).",
                 [(f"sum by (result) (increase(statestore_mqtt_connects_total{{{SEL}}}[{RATE}]))", "connect {{result}}"),
                  (f"sum by (job) (increase(statestore_mqtt_disconnects_total{{{SEL}}}[{RATE}]))", "disconnects"),
                  (f"sum by (kind) (increase(statestore_mqtt_publish_failures_total{{{SEL}}}[{RATE}]))",
                   "publish failed {{kind}}")], "short", steps(GREEN, (1, ORANGE), (10, RED)))
    d.timeseries("In-flight requests", "Requests being processed, per member.",
                 [(f"statestore_server_requests_in_flight{{{SEL}}}", "{{instance}}")], "short",
                 steps(GREEN, (512, ORANGE), (1024, RED)))
    d.timeseries("Request budget used", "Bytes of admitted requests not finished yet, per member "
                 "(limits.request_budget_mb, 64 MiB by default; over it requests are refused as overloaded).",
                 [(f"statestore_server_request_budget_used_bytes{{{SEL}}}", "{{instance}}")], "bytes",
                 steps(GREEN, (32 * 2**20, ORANGE), (64 * 2**20, RED)))
    d.timeseries("Outbound budget used", "Bytes of messages queued for the broker or awaiting its PUBACK, "
                 "per member and lane (replies: up to 16 KiB; bulk: notifications, device deliveries, feedback and "
                 "larger replies; each half of limits.outbound_budget_mb, 32 MiB by default), publishes that "
                 "waited for room per second, and times per second the bulk lane was held to its pace "
                 "(limits.bulk_egress_mb_per_sec, limits.bulk_egress_messages_per_sec).",
                 [(f"statestore_mqtt_outbound_bytes{{{SEL}}}", "{{instance}} {{lane}}"),
                  (f"sum by (lane) (rate(statestore_mqtt_outbound_waits_total{{{SEL}}}[{RATE}]))",
                   "waits/s {{lane}}"),
                  (f"sum by (job) (rate(statestore_mqtt_bulk_paced_total{{{SEL}}}[{RATE}]))",
                   "bulk paced/s")], "bytes",
                 steps(GREEN, (16 * 2**20, ORANGE), (32 * 2**20, RED)))
    d.timeseries("Retries and protocol refusals", "Retried requests answered from the reply memory, and "
                 "requests refused with __stat 505 (unsupported protocol version), per second.",
                 [(f"sum by (job) (rate(statestore_server_dedup_hits_total{{{SEL}}}[{RATE}]))", "dedup hits"),
                  (f"sum by (job) (rate(statestore_server_unsupported_protocol_version_total{{{SEL}}}[{RATE}]))",
                   "unsupported version")], "reqps", steps(GREEN, (1, ORANGE)))
    d.timeseries("Dropped requests by reason", "Requests that got no reply, per second by reason.",
                 [(f"sum by (reason) (rate(statestore_server_requests_dropped_total{{{SEL}}}[{RATE}]))",
                   "{{reason}}")], "reqps", steps(GREEN, (1, RED)))

    d.row("Reply memory")
    d.timeseries("Remembered replies", "Replies remembered for retries: replicated count (what the cap "
                 "limits.max_remembered_replies judges) and entries resident in each member's RAM.",
                 [(f"max by (job) (statestore_reply_memory_entries{{{SEL}}})", "replicated"),
                  (f"statestore_reply_memory_resident_entries{{{SEL}}}", "resident {{instance}}")], "short",
                 steps(GREEN, (800000, ORANGE), (1000000, RED)))
    d.timeseries("Reply memory bytes", "Bytes as the cap counts them (replicated; 256 MiB default cap) and "
                 "RAM each member holds for the reply tables.",
                 [(f"max by (job) (statestore_reply_memory_bytes{{{SEL}}})", "replicated"),
                  (f"statestore_reply_memory_resident_bytes{{{SEL}}}", "resident {{instance}}")], "bytes",
                 steps(GREEN, (192 * 2**20, ORANGE), (256 * 2**20, RED)))
    d.timeseries("Replies evicted", "Remembered replies evicted to stay within the caps, per second "
                 "(a retry of an evicted request runs again).",
                 [(f"max by (job) (rate(statestore_reply_memory_evicted_total{{{SEL}}}[{RATE}]))", "evicted")],
                 "ops", steps(GREEN, (1, ORANGE)))

    d.row("Device-bound queues")
    d.timeseries("Device-bound requests", "Service requests on devicebound/v1/command/invoke answered per "
                 "second, by command and result.",
                 [(f"sum by (command, result) (rate(statestore_devicebound_requests_total{{{SEL}}}[{RATE}]))",
                   "{{command}} {{result}}")], "reqps", steps(GREEN), show_thresholds=False)
    d.timeseries("Messages by transition", "Device-bound message transitions per second (enqueued, delivered, "
                 "completed, abandoned, rejected, expired, dead-lettered, purged, ...).",
                 [(f"sum by (transition) (rate(statestore_devicebound_messages_total{{{SEL}}}[{RATE}]))",
                   "{{transition}}")], "ops", steps(GREEN), show_thresholds=False)
    d.timeseries("Queued messages", "Messages queued (Enqueued and Invisible) and devices with state, "
                 "replicated (capped by devicebound.max_messages and max_devices, default 1,000,000 each), "
                 "as the leader's index counts them.",
                 [(f"max by (job) (statestore_devicebound_queued_messages{{{SEL}}})", "messages"),
                  (f"max by (job) (statestore_devicebound_devices{{{SEL}}})", "devices")], "short",
                 steps(GREEN, (800000, ORANGE), (1000000, RED)))
    d.timeseries("Queues by depth", "Devices whose queue holds this many messages (max_queue_depth: "
                 "default 50); queues that stay deep mean devices that stay offline.",
                 [(f"max by (depth) (statestore_devicebound_queues{{{SEL}}})", "{{depth}}")], "short",
                 steps(GREEN), show_thresholds=False, stack=True)
    d.timeseries("Queue index memory", "RAM each member holds for the queues' in-memory index (every "
                 "queued message's delivery state and due times, about 150 bytes each; rebuilt from the "
                 "database at start).",
                 [(f"statestore_devicebound_index_bytes{{{SEL}}}", "{{instance}}")], "bytes",
                 steps(GREEN, (256 * 2**20, ORANGE), (1 * 2**30, RED)))
    d.timeseries("Locks and dead letters", "Message locks that ran out (the message is delivered again) and "
                 "dead letters dropped to stay within max_dead_letters_per_device, per second.",
                 [(f"sum by (job) (rate(statestore_devicebound_lock_expiries_total{{{SEL}}}[{RATE}]))",
                   "lock expiries"),
                  (f"sum by (job) (rate(statestore_devicebound_dead_letters_dropped_total{{{SEL}}}[{RATE}]))",
                   "dead letters dropped")], "ops", steps(GREEN, (1, ORANGE)))
    d.timeseries("Feedback", "Feedback records written and batch events (cut, published, settled, "
                 "redelivered, dropped) per second.",
                 [(f"sum by (job) (rate(statestore_devicebound_feedback_records_total{{{SEL}}}[{RATE}]))",
                   "records"),
                  (f"sum by (event) (rate(statestore_devicebound_feedback_batches_total{{{SEL}}}[{RATE}]))",
                   "batches {{event}}")], "ops", steps(GREEN), show_thresholds=False)
    d.timeseries("Offline devices", "Devices whose push is backing off now (PUBACK 0x10: no subscriber), "
                 "backoffs started per second, and offline devices not backed off because the map was full.",
                 [(f"sum by (job) (statestore_devicebound_devices_in_backoff{{{SEL}}})", "in backoff"),
                  (f"sum by (job) (rate(statestore_devicebound_offline_backoffs_total{{{SEL}}}[{RATE}]))",
                   "backoffs/s"),
                  (f"sum by (job) (rate(statestore_devicebound_backoff_overflow_total{{{SEL}}}[{RATE}]))",
                   "overflow/s")], "short", steps(GREEN, (50000, ORANGE), (100000, RED)))
    d.timeseries("Device publishes", "Publishes from devices handled per second by kind (settle, receive, "
                 "activity), and dropped without reply by reason (malformed topics).",
                 [(f"sum by (kind) (rate(statestore_devicebound_device_publishes_total{{{SEL}}}[{RATE}]))",
                   "{{kind}}"),
                  (f"sum by (reason) (rate(statestore_devicebound_device_publishes_dropped_total{{{SEL}}}[{RATE}]))",
                   "dropped {{reason}}")], "ops", steps(GREEN, (1, ORANGE)))

    d.row("Process")
    d.timeseries("CPU", "CPU time used per second, per member (1 = one core).",
                 [(f"rate(process_cpu_seconds_total{{{SEL}}}[{RATE}])", "{{instance}}")], "percentunit",
                 steps(GREEN, (0.8, ORANGE), (1.5, RED)), w=6)
    d.timeseries("Resident memory", "RSS per member.",
                 [(f"process_resident_memory_bytes{{{SEL}}}", "{{instance}}")], "bytes",
                 steps(GREEN, (1 * 2**30, ORANGE), (2 * 2**30, RED)), w=6)
    d.timeseries("Open file descriptors", "Open fds per member, as a share of the process limit.",
                 [(f"process_open_fds{{{SEL}}} / process_max_fds{{{SEL}}}", "{{instance}}")], "percentunit",
                 steps(GREEN, (0.7, ORANGE), (0.9, RED)), w=6)
    d.timeseries("Threads and stalls", "OS threads per member, and times the process was frozen for over "
                 "500 ms (increase per interval).",
                 [(f"process_threads{{{SEL}}}", "threads {{instance}}"),
                  (f"sum by (instance) (increase(statestore_process_stalls_total{{{SEL}}}[{RATE}]))",
                   "stalls {{instance}}")], "short", steps(GREEN, (200, ORANGE), (1000, RED)), w=6)
    d.timeseries("Log lines held back", "Repeated WARN/ERROR lines the log throttle held back per "
                 "second (a peer that is down makes openraft repeat its error); the log shows the "
                 "first line and a `Suppressed N times` summary.",
                 [(f"sum by (instance) (rate(statestore_log_lines_suppressed_total{{{SEL}}}[{RATE}]))",
                   "{{instance}}")], "ops", steps(GREEN, (1, ORANGE), (50, RED)), w=8, h=4)
    d.stat("Build", "statestore version each member runs (value: seconds since the process started).",
           [(f"max by (instance, version) ((time() - process_start_time_seconds{{{SEL}}}) "
             f"* on (job, instance) group_left (version) statestore_build_info{{{SEL}}})",
             "{{instance}} {{version}}")], "s", steps(ORANGE, (300, GREEN)), w=16, h=4)
    return dashboard("statestore-details", "statestore / Details",
                     "Raft, storage, expiry, notifications, MQTT, reply memory, device-bound queue and "
                     "process metrics of every member.", d.panels, ["statestore"], [link("statestore / Overview", "statestore-overview")])


def render(board):
    return json.dumps(board, indent=2, ensure_ascii=False) + "\n"


def main():
    check = "--check" in sys.argv[1:]
    stale = []
    for name, board in [("statestore-overview.json", overview()), ("statestore-details.json", details())]:
        path = HERE / name
        text = render(board)
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
            panels = [p for p in board["panels"] if p["type"] != "row"]
            queries = sum(len(p["targets"]) for p in panels)
            print(f"{name}: {len(panels)} panels, {queries} queries")
    if stale:
        print(f"out of date (run python3 dashboards/generate.py): {', '.join(stale)}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
