"""Checks of the admin API that schemathesis cannot know from the document alone.

`audit_rows_match_requests`: the node writes one audit row per change that took effect and
none for anything refused (a snapshot's own rows, which the system writes after the request's
answer, are not a request's). Requests go one at a time (one worker), so the rows that appear
between two responses are the later response's. A request schemathesis generated as invalid
(negative mode), or any response that is not 2xx, must have written none; a 2xx that wrote
one names it in `X-Audit-Seq` (or `audit_seq` in its body, for the lifecycle writes), with
the response's `X-Request-Id` as its `request_id`. After the run, the trail holds exactly
the rows that 2xx writes announced.

`positive_data_acceptance_but_documented`: schemathesis's own `positive_data_acceptance`
(schema-valid requests must not be refused), less the refusals the document can only say in
words, because JSON Schema cannot express them. Each is excluded only for a request that
really breaks the rule, so a refusal of anything else still fails:
  - createReplayJob: `to` after `from`, at most 366 days after it, not in the future (fields
    compared with each other and with the clock); `source` must exist in the tenant (state).
  - addQuarantine: `until` in the future, at most 3660 days ahead (the clock).
  - getAuditConsistency: `from` at most `to` (the two compared).
  - watchEvents: `wait` at most 50s, `bookmark` 100ms to 300s (durations as text); 410 for a
    position past the last seq or in another incarnation (the node's state).
"""

import json
import os
import threading
from datetime import datetime, timedelta, timezone

import requests
import schemathesis
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance

BASE = os.environ["ANKUSA_FUZZ_BASE"]
AUTH = {"Authorization": "Bearer " + os.environ["ANKUSA_FUZZ_TOKEN"]}
SUMMARY = os.environ["ANKUSA_FUZZ_SUMMARY"]
WRITES = {"POST", "PUT", "PATCH", "DELETE"}


def _rows_after(seq):
    rows = []
    while True:
        page = requests.get(
            f"{BASE}/admin/v1/audit", params={"after": seq, "limit": 1000}, headers=AUTH, timeout=30
        )
        page.raise_for_status()
        body = page.json()
        rows.extend(body["rows"])
        if body["next"] is None:
            return rows
        seq = body["next"]


def _requested(rows):
    """The rows requests write: less a snapshot's own rows (its markers and items), which
    the system writes after the request's answer, in a task of its own."""
    return [r for r in rows if not (r["actor"] == "system" and r.get("snapshot"))]


def _is_negative(case):
    meta = case.meta
    return meta is not None and meta.generation.mode.is_negative


def _invalid_as_sent(ctx, response, case):
    """Whether a negative case is still invalid as sent, by schemathesis's own judgement.

    Some negative cases are valid once serialized (an extra header, a mutated value that
    serializes to a valid one): `negative_data_rejection` knows these and lets them pass.
    A case it would report as accepted is one the document calls invalid.
    """
    try:
        negative_data_rejection(ctx, response, case)
    except AssertionError:
        return True
    return False


def _announced_seq(response):
    header = response.headers.get("X-Audit-Seq") or response.headers.get("x-audit-seq")
    if header:
        value = header[0] if isinstance(header, list) else header
        return int(value)
    try:
        body = json.loads(response.content or b"null")
    except ValueError:
        return None
    # The lifecycle writes (drop a dead letter, enable a sink) name their row in the body.
    if isinstance(body, dict) and isinstance(body.get("audit_seq"), int):
        if "dropped" in body or "enabled" in body:
            return body["audit_seq"]
    return None


def _header(response, name):
    value = response.headers.get(name) or response.headers.get(name.lower())
    if isinstance(value, list):
        return value[0] if value else None
    return value


@schemathesis.check
class audit_rows_match_requests:
    """Rows only for accepted writes, one each, never for a request the document calls invalid."""

    def __init__(self):
        self.lock = threading.Lock()
        self.last_seq = 0
        self.announced = set()
        self.writes = 0
        self.negative = 0
        self.negative_refused = 0

    def after_response(self, ctx, response, case):
        with self.lock:
            new = _rows_after(self.last_seq)
            if new:
                self.last_seq = new[-1]["seq"]
            new = _requested(new)
            status = response.status_code
            method = case.method.upper()
            if _is_negative(case):
                self.negative += 1
                if status >= 400:
                    self.negative_refused += 1
            label = f"{method} {case.formatted_path} -> {status}"
            # Only writes announce rows (a read's body may name the last seq, as
            # `GET /admin/v1/lifecycle` does).
            seq = _announced_seq(response) if 200 <= status < 300 and method in WRITES else None
            if seq is not None:
                self.writes += 1
                self.announced.add(seq)
            if new and _is_negative(case) and _invalid_as_sent(ctx, response, case):
                raise AssertionError(
                    f"a request the document calls invalid wrote {len(new)} row(s): {label}: "
                    + ", ".join(f"{r['seq']} {r['action']}" for r in new)
                )
            if new and not 200 <= status < 300:
                raise AssertionError(
                    f"a refused request wrote {len(new)} row(s): {label}: "
                    + ", ".join(f"{r['seq']} {r['action']}" for r in new)
                )
            if seq is None and new:
                raise AssertionError(f"rows no response announced: {label}: {[r['seq'] for r in new]}")
            if seq is not None and new:
                if [r["seq"] for r in new] != [seq]:
                    raise AssertionError(f"{label} announced row {seq}, the trail grew by {[r['seq'] for r in new]}")
                rid = _header(response, "X-Request-Id")
                if new[0]["request_id"] != rid:
                    raise AssertionError(f"{label}: row {seq} has request_id {new[0]['request_id']!r}, not {rid!r}")

    def after_run(self, ctx):
        rows = _rows_after(0)
        seqs = {r["seq"] for r in _requested(rows)}
        with open(SUMMARY, "w") as f:
            json.dump(
                {
                    "rows": len(rows),
                    "announced_writes": len(self.announced),
                    "negative_requests": self.negative,
                    "negative_refused": self.negative_refused,
                },
                f,
            )
        if seqs != self.announced:
            odd = sorted(seqs ^ self.announced)[:20]
            held = {r["seq"]: f"{r['seq']} {r['action']} {r['actor']}" for r in rows if r["seq"] in odd}
            raise AssertionError(
                f"the trail holds {len(seqs)} rows, 2xx writes announced {len(self.announced)}: "
                f"unannounced {sorted(seqs - self.announced)[:20]}, missing {sorted(self.announced - seqs)[:20]}; "
                f"those the trail holds: {sorted(held.values())}"
            )


def _time(value):
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None


def _millis(value):
    """`<n>ms` or `<n>s` (the document's pattern) in milliseconds."""
    value = str(value)
    if value.endswith("ms") and value[:-2].isdigit():
        return int(value[:-2])
    if value.endswith("s") and value[:-1].isdigit():
        return int(value[:-1]) * 1000
    return None


def _source_exists(tenant, source):
    r = requests.get(f"{BASE}/admin/v1/tenants/{tenant}/sources/{source}", headers=AUTH, timeout=30)
    return r.status_code == 200


def _position_gone(case):
    """Whether a watch's position is past the node's last seq, or in another incarnation."""
    after = (case.headers or {}).get("Last-Event-ID", (case.query or {}).get("after", 0))
    status = requests.get(f"{BASE}/admin/v1/lifecycle", headers=AUTH, timeout=30).json()
    if int(after) > status["audit_seq"]:
        return True
    history = [i for i in status["incarnations"] if i["from"] <= int(after)] or status["incarnations"][:1]
    asked = (case.query or {}).get("incarnation")
    return asked is not None and str(asked) != history[-1]["id"]


def _documented_refusal(case, response):
    """Whether `response` is a refusal the document states in words only (see the module doc)."""
    op = case.operation.definition.raw.get("operationId")
    if op == "watchEvents" and response.status_code == 410:
        return _position_gone(case)
    if response.status_code != 422:
        return False
    field = (response.json() or {}).get("field")
    if op == "watchEvents" and field in ("wait", "bookmark"):
        ms = _millis((case.query or {}).get(field))
        low, high = (0, 50_000) if field == "wait" else (100, 300_000)
        return ms is not None and not low <= ms <= high
    if op == "getAuditConsistency" and field == "from":
        query = case.query or {}
        return int(query.get("from", 0)) > int(query.get("to", 0))
    if not isinstance(case.body, dict):
        return False
    now = datetime.now(timezone.utc)
    if op == "createReplayJob":
        start, end = _time(case.body.get("from")), _time(case.body.get("to"))
        if field == "to" and start and end:
            return end <= start or end - start > timedelta(days=366) or end > now - timedelta(seconds=1)
        if field == "source":
            return not _source_exists(case.path_parameters["tenant"], case.body.get("source"))
    if op == "addQuarantine" and field == "until":
        until = _time(case.body.get("until"))
        return until is not None and (until <= now + timedelta(seconds=1) or until > now + timedelta(days=3660))
    return False


@schemathesis.check
def positive_data_acceptance_but_documented(ctx, response, case):
    """`positive_data_acceptance`, less the cross-field and clock rules the document states in words."""
    if _documented_refusal(case, response):
        return None
    return positive_data_acceptance(ctx, response, case)
