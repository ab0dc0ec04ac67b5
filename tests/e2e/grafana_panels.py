"""The Grafana dashboard's "(time range)" panels, as the tests evaluate
them: their queries with Grafana's variables filled in as Grafana would,
what each shows (by legend), and what ``hermes-meter report`` says each
should show. Shared by ``test_grafana_totals.py`` and the pipeline sidecar.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

DASHBOARD = (
    Path(__file__).resolve().parents[2] / "collector-config" / "grafana" / "dashboards" / "hermes-meter.json"
)


def range_panels() -> dict[str, list[tuple[str, str]]]:
    """Every "(time range)" panel: its targets' (legend, expr)."""
    panels = {}
    for p in json.loads(DASHBOARD.read_text())["panels"]:
        if p["title"].endswith("(time range)"):
            panels[p["title"]] = [(t["legendFormat"], t["expr"]) for t in p["targets"]]
    return panels


def fill(expr: str, range_seconds: int) -> str:
    """Grafana's values: the platform variable's "All" (its allValue), the
    range of an instant query in whole seconds."""
    return expr.replace("$platform", ".*").replace("$__range", f"{range_seconds}s")


def shown(query: Callable[[str], list[dict]], range_seconds: int) -> dict[str, dict[str, float]]:
    """What each panel shows, by legend (a series' label fills its legend's
    placeholder, as in Grafana); ``query`` answers a PromQL instant query
    with the API's ``result`` list."""
    out: dict[str, dict[str, float]] = {}
    for title, targets in range_panels().items():
        values: dict[str, float] = {}
        for legend, expr in targets:
            for series in query(fill(expr, range_seconds)):
                name = legend
                for k, v in series["metric"].items():
                    name = name.replace("{{" + k + "}}", v)
                values[name] = float(series["value"][1])
        out[title] = values
    return out


def expected(after: dict, before: dict | None = None) -> dict[str, dict[str, float]]:
    """What each panel should show over a range: ``report --json`` at its
    end less ``report --json`` at its start (None: nothing before it)."""

    def diff(key: str, group: str | None = None, name: str | None = None) -> float:
        def pick(report: dict | None) -> float:
            if report is None:
                return 0.0
            if group is None:
                return float(report["totals"][key])
            return sum(float(g[key]) for g in report[group] if g["key"] == name)

        return pick(after) - pick(before)

    return {
        "Spend (time range)": {"spend": diff("cost_usd")},
        "Spend by model (time range)": {
            g["key"]: diff("cost_usd", "by_model", g["key"]) for g in after["by_model"]
        },
        "Tokens (time range)": {
            t: diff(f"{t}_tokens") for t in ("input", "output", "cache_read", "cache_write", "reasoning")
        },
        "Calls (time range)": {
            "LLM calls": diff("llm_calls"),
            "API errors": diff("api_errors"),
            "tool calls": diff("tool_calls"),
        },
    }


def mismatches(got: dict[str, dict[str, float]], want: dict[str, dict[str, float]]) -> list:
    """Where the panels differ from the report (a value the report counts
    as 0 may have no series at all); empty when they agree."""
    out: list = []
    if set(got) != set(want):
        return [("panels", sorted(got), sorted(want))]
    for title, values in want.items():
        for name, value in values.items():
            if abs(got[title].get(name, 0.0) - value) > 1e-9:
                out.append((title, name, got[title].get(name), value))
        out += [(title, name, got[title][name], None) for name in set(got[title]) - set(values)]
    return out
