"""The report of ``memledger verify``: one check per comparison (ok, lag, differs or skipped),
counts per (tenant, space) side by side, what repair did; as text or JSON."""

import json
import sys
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from memledger_cli import verify_models, verify_stream, verify_vectors

Status = Literal["ok", "lag", "differs", "skipped"]


@dataclass
class Check:
    name: str
    status: Status
    summary: str
    differences: list[dict[str, Any]] = field(default_factory=list)
    lag: int = 0


@dataclass
class Report:
    committed: int
    checks: list[Check]
    scopes: list[dict[str, Any]]
    repairs: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.status in ("ok", "skipped") for c in self.checks)

    def check(self, name: str) -> Check:
        return next(c for c in self.checks if c.name == name)


@dataclass
class Found:
    """The raw comparisons a report is made of (and repair decides from)."""

    stream: verify_stream.StreamComparison
    models: verify_models.ModelComparison
    vectors: verify_vectors.VectorComparison | None


# --- the report -----------------------------------------------------------------------------

def build(committed: int, found: Found, skip_vectors: str) -> Report:
    checks = [_stream_check(found.stream), _models_check(found.models),
              _vectors_check(found.vectors, skip_vectors)]
    return Report(committed, checks, _scopes(found))


def _stream_check(s: verify_stream.StreamComparison) -> Check:
    differences = [{"what": kind, "count": found.count, "examples": found.first}
                   for kind, found in (("extra", s.extra), ("repeated", s.repeated),
                                       ("foreign", s.foreign), ("altered", s.altered))
                   if found.count]
    if s.gaps.count:
        differences.insert(0, {"what": "missing", "count": s.gaps.count,
                               "examples": [_run(r) for r in s.gaps.runs]})
    status: Status = "differs" if s.differs else "lag" if s.behind.count else "ok"
    summary = (f"{s.stream}: {sum(s.in_stream.counts.values())} messages for "
               f"{sum(s.in_store.counts.values())} events through position {s.until}, "
               f"last relayed position {s.relayed}, documents sha256 {s.digest[:12]}")
    if s.behind.count:
        summary += (f"; behind by {s.behind.count} events (from position "
                    f"{s.behind.runs[0][0]})")
    return Check("events stream", status, summary, differences, s.behind.count)


def _run(run: list[int]) -> str:
    first, last, count = run
    return f"position {first}" if count == 1 else f"positions {first}..{last} ({count} events)"


def _models_check(m: verify_models.ModelComparison) -> Check:
    if m.missing:
        return Check("postgres read model", "differs", m.missing, lag=m.committed)
    differences = m.differences()
    status: Status = "differs" if differences else "lag" if m.lag else "ok"
    rows = sum(live[0] for live, _ in m.tables.values())
    summary = (f"{m.live_schema} at position {m.position} (committed {m.committed}): "
               f"{rows} rows in {len({k[0] for k in m.tables})} tables, compared with a "
               "rebuild from the log")
    if m.lag:
        summary += f"; the projector is behind by {m.lag} positions"
    return Check("postgres read model", status, summary, differences, m.lag)


def _vectors_check(v: verify_vectors.VectorComparison | None, skip_vectors: str) -> Check:
    if v is None or v.skipped:
        reason = skip_vectors or (v.skipped if v else "no read model to compare with")
        return Check("vector index", "skipped", f"not checked: {reason}")
    differences = v.differences()
    points = sum(d.points for d in v.actual.values())
    summary = (f"{v.source}: {points} points in {len(v.actual)} spaces as of position "
               f"{v.position}")
    lag = max(0, v.position - v.projected) if v.projected is not None else 0
    if v.projected is not None:
        summary += f" (its projector reports position {v.projected} since it started)"
    status: Status = "ok" if not differences else "lag" if lag else "differs"
    return Check("vector index", status, summary, differences, lag)


def _scopes(found: Found) -> list[dict[str, Any]]:
    changes = {(t, s): d[0][0] for (table, t, s), d in found.models.tables.items()
               if table == "changes"}
    points = {k: d.points for k, d in (found.vectors.actual if found.vectors else {}).items()}
    rows = []
    for row in verify_stream.per_scope(found.stream):
        key = (row["tenant"], row["space"])
        rows.append({**row, "postgres_changes": changes.get(key, 0),
                     "vector_points": points.get(key, 0)})
    return rows


# --- output ---------------------------------------------------------------------------------

def render_json(report: Report, before: Report | None = None) -> str:
    document: dict[str, Any] = {"ok": report.ok, **asdict(report)}
    if before is not None:
        document["before_repair"] = {"ok": before.ok, **asdict(before)}
    return json.dumps(document, indent=2, default=str)


def render_text(report: Report) -> str:
    tenants = {row["tenant"] for row in report.scopes}
    lines = [f"memledger verify: through position {report.committed}, {len(tenants)} tenants, "
             f"{len(report.scopes)} spaces", ""]
    for check in report.checks:
        lines.append(f"  {check.name:<20} {check.status.upper():<8} {check.summary}")
        lines.extend(f"  {'':<29}- {_difference(d)}" for d in check.differences)
    if report.scopes:
        lines += ["", f"  {'tenant/space':<28} {'store':>8} {'stream':>8} {'pg changes':>11} "
                  f"{'vectors':>8}"]
        lines.extend(f"  {r['tenant'] + '/' + r['space']:<28} {r['store']:>8} {r['stream']:>8}"
                     f" {r['postgres_changes']:>11} {r['vector_points']:>8}"
                     for r in report.scopes)
    if report.repairs:
        lines += ["", "repairs:"] + [f"  {line}" for line in report.repairs]
    lines += ["", "all agree" if report.ok else
              "NOT all agree" + ("" if report.repairs else ": `memledger verify --repair` "
                                 "mends what can be mended")]
    return "\n".join(lines)


def _difference(d: dict[str, Any]) -> str:
    if "table" in d:
        return (f"{d['table']} {d['tenant']}/{d['space']}: {d['rows']} rows, expected "
                f"{d['expected_rows']}: {d['what']}")
    if "points" in d:
        return (f"{d['tenant']}/{d['space']}: {d['points']} points, expected "
                f"{d['expected_points']}: {d['what']}")
    examples = "; ".join(d["examples"][:3])
    return f"{d['what']}: {d['count']} ({examples}{'; ...' if d['count'] > 3 else ''})"


def emit(report: Report, before: Report | None, as_json: bool) -> int:
    if as_json:
        print(render_json(report, before))
    else:
        if before is not None:
            print(render_text(before) + "\n\nafter repair:\n", file=sys.stdout)
        print(render_text(report))
    return 0 if report.ok else 1
