"""The statecore page's HTML: server-rendered from the rows of :mod:`statecore.ops.overview`.

No template engine, no build step, no script or style from elsewhere: each function returns a
string of escaped HTML. Every link is relative to the page's ``<base href>`` (the mount point of
the plugin's app), so the page works under any Airflow base URL. The only script is the lookup
form's: it fetches ``api/lookup`` and shows the result without leaving the page (the form works
without it too), and it shows each job's states only once the job is picked.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from html import escape
from typing import Any
from urllib.parse import quote

__all__ = [
    "checkpoint_page",
    "error_page",
    "index_page",
    "job_page",
    "key_group_chart",
    "lookup_page",
    "run_page",
]

_STYLE = """
body{font-family:system-ui,sans-serif;margin:1rem 1.5rem;color:#1a202c}
h1{font-size:1.4rem}h2{font-size:1.15rem;margin-top:1.6rem}h3{font-size:1rem}
table{border-collapse:collapse;margin:.4rem 0;font-size:.9rem}
th,td{border:1px solid #cbd5e0;padding:.2rem .5rem;text-align:left;vertical-align:top}
th{background:#edf2f7}td.num{text-align:right;font-variant-numeric:tabular-nums}
nav a{margin-right:1rem}.muted{color:#718096}.error{color:#c53030}
.kg-chart rect{fill:#3182ce}.kg-chart rect:hover{fill:#2c5282}
form label,form select{margin-right:.6rem}input,select{width:9rem}
label[for]{margin-right:.3rem}input[type=checkbox]{width:auto}
#lookup-result:empty{display:none}
#lookup-result{white-space:pre-wrap;font-family:monospace;background:#f7fafc;padding:.4rem}
"""

_LOOKUP_SCRIPT = """
const lookupJob = document.getElementById("lookup-job");
const lookupState = document.getElementById("lookup-state");
const showStates = () => {
  for (const group of lookupState.querySelectorAll("optgroup")) {
    group.hidden = group.disabled = group.dataset.job !== lookupJob.value;
  }
  const picked = lookupState.selectedOptions[0];
  if (!picked || picked.parentElement.disabled) {
    const first = lookupState.querySelector("optgroup:not([disabled]) option");
    if (first) first.selected = true; else lookupState.selectedIndex = -1;
  }
};
lookupJob.addEventListener("change", showStates);
showStates();
const grouped = (n) => Number(n).toLocaleString("en-US");
document.getElementById("lookup-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const out = document.getElementById("lookup-result");
  const query = new URLSearchParams(new FormData(event.target)).toString();
  out.textContent = "looking up ...";
  try {
    const response = await fetch("api/lookup?" + query, {credentials: "same-origin"});
    const body = await response.json();
    out.dataset.status = response.ok ? "ok" : "error";
    out.textContent = response.ok
      ? ("value: " + JSON.stringify(body.value) + "\\nfound: " + body.found +
         "\\nkey group: " + body.key_group + "\\nat: " + body.point +
         "\\nbytes read: " + grouped(body.bytes_read) + " of " + grouped(body.state_bytes) +
         " (" + body.files_read + " file(s))" +
         (body.expired ? "\\nexpired: " + body.expired : "") +
         (body.live ? "\\nlive: after checkpoint " + body.live_checkpoint +
                      (body.uncommitted ? ", with updates no checkpoint holds yet" : "") : "") +
         (body.fallback ? "\\nlive lookup fell back: " + body.fallback : ""))
      : ("error: " + body.detail);
  } catch (error) {
    out.dataset.status = "error";
    out.textContent = "error: " + error;
  }
});
"""


def _page(base: str, title: str, body: str, *, script: str = "") -> str:
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<base href='{escape(base)}'><title>{escape(title)}</title>"
        f"<style>{_STYLE}</style></head><body>"
        "<nav><a href='./'>statecore</a><a href='./#savepoints'>savepoints</a>"
        "<a href='./#lookup'>key lookup</a><a href='./#runs'>DAG runs</a></nav>"
        f"<h1>{escape(title)}</h1>{body}"
        + (f"<script>{script}</script>" if script else "")
        + "</body></html>"
    )


_GROUPED = frozenset({"rows", "bytes", "bytes_read", "state_bytes", "samples"})
"""Columns whose numbers are shown with thousands separators (not ids, nor parallelisms)."""
_TIMES = frozenset(
    {
        "started_at",
        "completed_at",
        "created_at",
        "ended_at",
        "latest_completed_at",
        "watermark_at",
        "lease_expires_at",
        "pending_since",
    }
)
"""Columns of ISO timestamps, shown to the second in UTC (the full value as the tooltip)."""


def _time(text: str) -> str:
    try:
        return datetime.fromisoformat(text).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
    except ValueError:
        return text


def _cell(value: Any, key: str = "", href: str | None = None) -> str:
    """One table cell; its content a link to ``href`` (relative) when given."""
    if value is None:
        return "<td class='muted'>–</td>"
    if isinstance(value, bool):
        text, cls = ("yes" if value else "no"), ""
    elif isinstance(value, int) and key not in _GROUPED:
        text, cls = str(value), " class='num'"
    elif isinstance(value, int | float):
        text, cls = _number(value), " class='num'"
    elif key in _TIMES:
        text, cls = _time(str(value)), f" title='{escape(str(value))}'"
    else:
        text, cls = str(value), ""
    content = escape(text) if href is None else f"<a href='{escape(href)}'>{escape(text)}</a>"
    return f"<td{cls}>{content}</td>"


def _number(value: float) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:,.3f}".rstrip("0").rstrip(".")


def _table(
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[tuple[str, str]],
    *,
    table_id: str,
    links: Mapping[str, Any] | None = None,
    empty: str = "none",
) -> str:
    """A table of ``rows`` with ``columns`` ``(key, heading)``; ``links`` maps a column to a
    function of the row that returns the cell's link (relative) or ``None``."""
    if not rows:
        return f"<p id='{table_id}' class='muted'>{escape(empty)}</p>"
    head = "".join(f"<th>{escape(heading)}</th>" for _, heading in columns)
    body = []
    for row in rows:
        cells = []
        for key, _ in columns:
            link = (links or {}).get(key)
            cells.append(_cell(row.get(key), key, link(row) if link is not None else None))
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (
        f"<table id='{table_id}'><thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def _q(text: Any) -> str:
    return quote(str(text), safe="")


def _checkpoint_href(row: Mapping[str, Any]) -> str:
    return f"jobs/{_q(row['job'])}/checkpoints/{row['checkpoint']}"


_JOB_COLUMNS = (
    ("job", "job"),
    ("parallelism", "parallelism"),
    ("max_parallelism", "max parallelism"),
    ("latest_checkpoint", "latest checkpoint"),
    ("latest_completed_at", "completed"),
    ("lease_holder", "lease holder"),
)
_SAVEPOINT_COLUMNS = (
    ("job", "job"),
    ("savepoint", "savepoint"),
    ("reason", "reason"),
    ("from_checkpoint", "from checkpoint"),
    ("parallelism", "parallelism"),
    ("rows", "rows"),
    ("bytes", "bytes"),
    ("created_at", "created"),
    ("path", "path"),
)
_RUN_COLUMNS = (
    ("dag_id", "DAG"),
    ("run_id", "run"),
    ("job", "job"),
    ("checkpoint", "checkpoint"),
    ("matched_by", "matched by"),
    ("outcome", "outcome"),
    ("ended_at", "ended"),
)
_NO_OP_NOTE = (
    "<p class='muted' id='no-op-note'>no-op: the checkpoint was complete before the run "
    "started, so the run changed nothing (a completed checkpoint id replays as a no-op).</p>"
)
_CHECKPOINT_COLUMNS = (
    ("checkpoint", "id"),
    ("kind", "kind"),
    ("status", "status"),
    ("started_at", "started (UTC)"),
    ("completed_at", "completed (UTC)"),
    ("duration_s", "duration (s)"),
    ("rows", "rows"),
    ("bytes", "bytes"),
    ("watermark_at", "watermark"),
    ("warm", "warm tasks"),
    ("restore_subtasks", "restored subtasks"),
    ("restore_max_seconds", "slowest restore (s)"),
    ("worst_p99_us", "worst p99 (µs)"),
)
_PENDING_COLUMNS = (
    ("checkpoint", "checkpoint"),
    ("output", "output"),
    ("table", "table"),
    ("files", "files"),
    ("rows", "rows"),
    ("pending_since", "pending since (UTC)"),
    ("why", "why"),
)
_LATENCY_COLUMNS = (
    ("state", "state"),
    ("access", "access"),
    ("samples", "samples"),
    ("p50_us", "p50 (µs)"),
    ("p95_us", "p95 (µs)"),
    ("p99_us", "p99 (µs)"),
)


def _run_links() -> dict[str, Any]:
    return {
        "checkpoint": lambda r: _checkpoint_href(r),
        "job": lambda r: f"jobs/{_q(r['job'])}",
    }


def _option(value: str, selected: bool) -> str:
    chosen = " selected" if selected else ""
    return f"<option value='{escape(value)}'{chosen}>{escape(value)}</option>"


def _lookup_form(
    states: Mapping[str, Sequence[str]], values: Mapping[str, str] | None = None
) -> str:
    """The lookup form; the job and the state are picked from lists of what the catalog holds
    (``states``: each job the user may read, with the states of its latest checkpoint), the
    other fields filled in from ``values``."""
    values = values or {}
    job = values.get("job") or ""
    job = job if job in states else next(iter(states), "")
    names = states.get(job, ())
    state = values.get("state") or ""
    state = state if state in names else next(iter(names), "")
    jobs = "".join(_option(j, j == job) for j in states)
    groups = "".join(
        f"<optgroup label='{escape(j)}' data-job='{escape(j)}'>"
        + "".join(_option(s, j == job and s == state) for s in group)
        + "</optgroup>"
        for j, group in states.items()
    )
    picks = (  # labels beside, not around, the lists: a list's name is then its label alone
        f"<label for='lookup-job'>job</label><select name='job' id='lookup-job' required>{jobs}"
        "</select><label for='lookup-state'>state</label><select name='state' "
        f"id='lookup-state' required>{groups}</select>"
    )
    fields = [
        ("key", "key", "required"),
        ("user_key", "user key (map)", ""),
        ("namespace", "namespace", ""),
        ("point", "checkpoint id or savepoint", ""),
    ]
    inputs = picks + "".join(
        f"<label>{escape(label)} <input name='{name}' id='lookup-{name}' "
        f"value='{escape(values.get(name) or '')}' {extra}></label>"
        for name, label, extra in fields
    )
    live = "checked" if values.get("live") in ("on", "true", "1") else ""
    inputs += (
        f"<label><input type='checkbox' name='live' id='lookup-live' {live}> live (the running "
        "stream's task)</label>"
    )
    return (
        "<h2 id='lookup'>Key lookup</h2>"
        "<p class='muted'>One key's value at a checkpoint (default: the latest) or a savepoint; "
        "only the key's key group is read. Live: the running stream's task that holds the key "
        "answers, with updates no checkpoint holds yet.</p>"
        f"<form id='lookup-form' action='lookup' method='get'>{inputs}"
        "<button type='submit'>Look up</button></form>"
    )


def _lookup_result(result: Mapping[str, Any] | None, error: str | None) -> str:
    if error is not None:
        return f"<div id='lookup-result' data-status='error'>error: {escape(error)}</div>"
    if result is None:
        return "<div id='lookup-result'></div>"
    lines = [
        f"value: {json.dumps(result['value'])}",
        f"found: {'true' if result['found'] else 'false'}",
        f"key group: {result['key_group']}",
        f"at: {result['point']}",
        f"bytes read: {_number(result['bytes_read'])} of {_number(result['state_bytes'])} "
        f"({result['files_read']} file(s))",
    ]
    if result.get("expired"):
        lines.append(f"expired: {result['expired']}")
    if result.get("live"):
        lines.append(
            f"live: after checkpoint {result['live_checkpoint']}"
            + (", with updates no checkpoint holds yet" if result.get("uncommitted") else "")
        )
    if result.get("fallback"):
        lines.append(f"live lookup fell back: {result['fallback']}")
    return f"<div id='lookup-result' data-status='ok'>{escape(chr(10).join(lines))}</div>"


def index_page(
    base: str,
    *,
    jobs: Sequence[Mapping[str, Any]],
    savepoints: Sequence[Mapping[str, Any]],
    runs: Sequence[Mapping[str, Any]],
    states: Mapping[str, Sequence[str]],
    runs_error: str | None = None,
) -> str:
    """Jobs, savepoints, the lookup form (``states``: its lists, see :func:`lookup_page`) and
    the DAG runs that published checkpoints."""
    body = (
        "<h2 id='jobs'>Jobs</h2>"
        + _table(
            jobs,
            _JOB_COLUMNS,
            table_id="jobs-table",
            links={
                "job": lambda r: f"jobs/{_q(r['job'])}",
                "latest_checkpoint": lambda r: (
                    f"jobs/{_q(r['job'])}/checkpoints/{r['latest_checkpoint']}"
                ),
            },
            empty="no job in the catalog yet",
        )
        + "<h2 id='savepoints'>Savepoints</h2>"
        + _table(
            savepoints,
            _SAVEPOINT_COLUMNS,
            table_id="savepoints-table",
            links={
                "from_checkpoint": lambda r: _checkpoint_href(
                    {"job": r["job"], "checkpoint": r["from_checkpoint"]}
                )
            },
            empty="no savepoint",
        )
        + _lookup_form(states)
        + _lookup_result(None, None)
        + "<h2 id='runs'>DAG runs and their checkpoints</h2>"
        + (f"<p class='error'>{escape(runs_error)}</p>" if runs_error else "")
        + _table(
            runs,
            _RUN_COLUMNS,
            table_id="runs-table",
            links=_run_links(),
            empty="no DAG run has published a statecore checkpoint Asset yet",
        )
        + (_NO_OP_NOTE if any(r.get("outcome") == "no-op" for r in runs) else "")
    )
    return _page(base, "statecore", body, script=_LOOKUP_SCRIPT)


def _checkpoint_table_rows(checkpoints: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for c in checkpoints:
        restore = c.get("restore") or {}
        latency = c.get("latency") or []
        rows.append(
            {
                **c,
                "restore_subtasks": restore.get("subtasks"),
                "restore_max_seconds": restore.get("max_seconds"),
                "worst_p99_us": max((row["p99_us"] for row in latency), default=None),
            }
        )
    return rows


def _pending_output(job: str, pending: Sequence[Mapping[str, Any]]) -> str:
    """The section on the output of completed checkpoints not in its tables yet (rows of
    :func:`statecore.ops.overview.pending_outputs_overview`): which, since when, why, and what
    commits it; nothing when none is pending."""
    if not pending:
        return ""
    checkpoints = sorted({int(p["checkpoint"]) for p in pending})
    return (
        "<h2 id='pending-output'>Pending output</h2>"
        f"<p class='error' id='pending-output-note'>Checkpoint(s) "
        f"{escape(', '.join(str(c) for c in checkpoints))} completed, but their output is not "
        f"in its tables yet ({len(pending)} commit(s)): readers do not see those rows. The "
        "job's next run, the <code>state_maintenance</code> DAG's retention task, a savepoint, "
        "rescale or ttl-cleanup of the job, or "
        f"<code>statecore catalog recover {escape(job)}</code> commits it (once).</p>"
        + _table(
            pending,
            _PENDING_COLUMNS,
            table_id="pending-output-table",
            links={"checkpoint": lambda r: _checkpoint_href({"job": job, **r})},
        )
    )


def job_page(
    base: str,
    job: Mapping[str, Any],
    *,
    checkpoints: Sequence[Mapping[str, Any]],
    savepoints: Sequence[Mapping[str, Any]],
    runs: Sequence[Mapping[str, Any]],
    states: Sequence[str],
    pending_outputs: Sequence[Mapping[str, Any]] = (),
) -> str:
    """A job: its settings, the pending output of its completed checkpoints (if any),
    checkpoints (newest first), savepoints, DAG runs and the lookup form for its ``states``."""
    name = str(job["job"])
    body = (
        _table([job], _JOB_COLUMNS, table_id="job-table")
        + _pending_output(name, pending_outputs)
        + "<h2 id='checkpoints'>Checkpoints</h2>"
        + _table(
            _checkpoint_table_rows(checkpoints),
            _CHECKPOINT_COLUMNS,
            table_id="checkpoints-table",
            links={"checkpoint": _checkpoint_href},
            empty="no checkpoint",
        )
        + "<h2 id='savepoints'>Savepoints</h2>"
        + _table(savepoints, _SAVEPOINT_COLUMNS, table_id="savepoints-table", empty="none")
        + "<h2 id='runs'>DAG runs</h2>"
        + _table(runs, _RUN_COLUMNS, table_id="runs-table", links=_run_links(), empty="none")
        + (_NO_OP_NOTE if any(r.get("outcome") == "no-op" for r in runs) else "")
        + _lookup_form({name: states}, {"job": name})
        + _lookup_result(None, None)
    )
    return _page(base, f"Job {name}", body, script=_LOOKUP_SCRIPT)


def key_group_chart(table: Mapping[str, Any], max_parallelism: int) -> str:
    """Bytes per key group of one state table as an inline SVG bar chart: one ``rect`` per key
    group the table holds (its ``<title>`` gives key group, rows and bytes), the x axis every
    key group from 0 to ``max_parallelism - 1``. The caption names the state as the lookup
    form and the latency table do, its operator beside it."""
    groups = table["key_groups"]
    width, height, bar = 640, 120, 640 / max(1, max_parallelism)
    top = max((g["bytes"] for g in groups), default=0) or 1
    bars = "".join(
        f"<rect x='{g['key_group'] * bar:.2f}' y='{height - g['bytes'] / top * height:.2f}' "
        f"width='{max(bar - 0.5, 0.5):.2f}' height='{g['bytes'] / top * height:.2f}' "
        f"data-key-group='{g['key_group']}'><title>key group {g['key_group']}: "
        f"{g['rows']:,} rows, {g['bytes']:,} bytes</title></rect>"
        for g in groups
    )
    state, operator = escape(str(table["state"])), escape(str(table["operator"]))
    return (
        f"<figure><svg class='kg-chart' data-state='{state}' role='img' "
        f"aria-label='bytes per key group of state {state} (operator {operator})' "
        f"width='{width}' height='{height + 14}' viewBox='0 0 {width} {height + 14}'>"
        f"<line x1='0' y1='{height}' x2='{width}' y2='{height}' stroke='#a0aec0'/>{bars}"
        f"<text x='0' y='{height + 12}' font-size='10'>0</text>"
        f"<text x='{width}' y='{height + 12}' font-size='10' text-anchor='end'>"
        f"{max_parallelism - 1}</text></svg>"
        f"<figcaption><b class='state-name'>{state}</b> (operator {operator}, "
        f"{escape(str(table['table_kind']))}, Delta version {table['version']}): "
        f"{len(groups):,} key groups, {table['rows']:,} rows, "
        f"{table['bytes']:,} bytes, largest key group {top if groups else 0:,} bytes"
        "</figcaption></figure>"
    )


def checkpoint_page(base: str, detail: Mapping[str, Any]) -> str:
    """One checkpoint: its row, bytes per key group per state (charts), each subtask's restore
    and the latency percentiles."""
    job, checkpoint_id = detail["job"], detail["checkpoint"]
    keyed = [t for t in detail["tables"] if t["table_kind"] != "operator"]
    others = [t for t in detail["tables"] if t["table_kind"] == "operator"]
    body = (
        f"<p><a href='jobs/{_q(job)}'>job {escape(str(job))}</a></p>"
        + _table(_checkpoint_table_rows([detail]), _CHECKPOINT_COLUMNS, table_id="checkpoint-table")
        + (f"<p class='error'>{escape(str(detail['error']))}</p>" if detail.get("error") else "")
        + "<h2 id='key-groups'>Size per key group</h2>"
        + (
            "".join(key_group_chart(t, int(detail["max_parallelism"])) for t in keyed)
            or "<p class='muted'>no keyed state</p>"
        )
        + (
            "<h3>Operator state</h3>"
            + _table(
                others,
                (
                    ("operator", "operator"),
                    ("state", "state"),
                    ("rows", "rows"),
                    ("bytes", "bytes"),
                ),
                table_id="operator-state-table",
            )
            if others
            else ""
        )
        + "<h2 id='restore'>Restore per subtask</h2>"
        + _table(
            detail.get("restore_subtasks") or [],
            (("subtask", "subtask"), ("bytes", "bytes read"), ("seconds", "seconds")),
            table_id="restore-table",
            empty="no restore recorded",
        )
        + "<h2 id='latency'>State-access latency</h2>"
        + _table(
            detail.get("latency") or [],
            _LATENCY_COLUMNS,
            table_id="latency-table",
            empty="latency tracking was off (STATECORE_LATENCY_SAMPLE_INTERVAL)",
        )
    )
    return _page(base, f"Checkpoint {checkpoint_id} of {job}", body)


def lookup_page(
    base: str,
    states: Mapping[str, Sequence[str]],
    values: Mapping[str, str],
    result: Mapping[str, Any] | None,
    error: str | None,
) -> str:
    """The lookup form (filled in) and its result: what the form shows without script.
    ``states`` maps each job the user may read to the states its latest checkpoint holds: the
    form's lists to pick the job and the state from."""
    body = _lookup_form(states, values) + _lookup_result(result, error)
    return _page(base, "Key lookup", body, script=_LOOKUP_SCRIPT)


def run_page(base: str, dag_id: str, run_id: str, links: Sequence[Mapping[str, Any]]) -> str:
    """The tab of a DAG run: the checkpoint(s) it published, linked to their pages, a no-op
    run's marked as such."""
    title = f"DAG run {run_id} of {dag_id}"
    if not links:
        body = (
            "<p id='run-checkpoint' class='muted'>This run published no statecore checkpoint "
            "(its tasks have no <code>statecore://</code> Asset outlet, or it has not finished)."
            "</p>"
        )
    else:
        items = "".join(
            (
                f"<li>job <a href='jobs/{_q(link['job'])}'>{escape(str(link['job']))}</a>: "
                f"<a class='checkpoint-link' href='{escape(_checkpoint_href(link))}'>checkpoint "
                f"{link['checkpoint']}</a> <span class='muted'>(matched by "
                f"{escape(str(link['matched_by']))})</span>"
                + (
                    " <strong class='no-op'>no-op</strong>: the checkpoint was complete before "
                    "this run started"
                    if link.get("outcome") == "no-op"
                    else ""
                )
                + "</li>"
            )
            if link["checkpoint"] is not None
            else f"<li>job {escape(str(link['job']))}: no completed checkpoint found</li>"
            for link in links
        )
        body = f"<ul id='run-checkpoint'>{items}</ul>"
    return _page(base, title, body)


def error_page(base: str, status: int, message: str) -> str:
    """What the page shows for a statecore error (an unknown job or checkpoint, ...)."""
    return _page(base, f"Error {status}", f"<p class='error' id='error'>{escape(message)}</p>")
