"""The agent asks the meter: in a real Hermes, with the plugin's defaults,
the model calls hermes-meter's read-only ``meter_spend`` tool and what it
reads equals what ``hermes-meter report`` says of the same moment."""

from __future__ import annotations

import json
import subprocess

from test_budgets import _scenario, _steps


def _tool_answer(out) -> dict:
    rows = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines() if x.strip()]
    answered = [r for r in rows if r.get("tool_results")]
    assert answered, "no request carried the meter_spend result"
    return json.loads(answered[0]["tool_results"][0])


def test_the_model_reads_its_spend_and_budget_and_report_agrees(hermes_bin, tmp_path) -> None:
    out = _scenario(
        hermes_bin,
        tmp_path,
        """
        step budget "$BUDGET" budget set global daily 5
        chat first "plain question please"
        sid=$(session_of "$STEPS/2-first.stderr")
        echo "$sid" > "$OUTDIR/session_id"
        chat ask "METERSPEND how much have I spent so far" --resume "$sid"
        """,
    )
    steps = _steps(out)
    assert steps["ask"][0] == 0 and "MOCK-FINAL-ANSWER" in steps["ask"][1], steps["ask"]
    answer = _tool_answer(out)
    assert answer["schema"] == "hermes-meter.agent.v1", answer
    sid = (out / "session_id").read_text().strip()
    assert answer["session"]["session_id"] == sid, answer
    # `report` of everything up to the moment the tool read the ledger.
    cli = hermes_bin.parent / "hermes-meter"
    p = subprocess.run(
        [str(cli), "--home", str(out / "meter"), "report", "--json", "--until", answer["as_of"]],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout)
    totals = report["totals"]
    assert answer["today"]["llm_calls"] == totals["llm_calls"], (answer, totals)
    assert abs(answer["today"]["cost_usd"] - totals["cost_usd"]) < 1e-6, (answer, totals)
    assert answer["today"]["output_tokens"] == totals["output_tokens"]
    # The store holds that one session: its calls up to then are the window's.
    assert [g["key"] for g in report["by_session"]] == [sid], report["by_session"]
    assert answer["session"]["llm_calls"] == totals["llm_calls"] >= 2, (answer, totals)
    assert abs(answer["session"]["cost_usd"] - totals["cost_usd"]) < 1e-6
    # The budget's headroom, as the gate counts it.
    (budget,) = answer["budgets"]
    assert (budget["scope"], budget["limit"], budget["amount"]) == ("global", "daily", 5.0), budget
    assert abs(budget["used"] - totals["cost_usd"]) < 1e-6, (budget, totals)
    assert abs(budget["left"] - (5.0 - budget["used"])) < 1e-6, budget
    # Nothing of the conversation is in it.
    text = json.dumps(answer)
    assert "plain question" not in text and "MOCK-FINAL-ANSWER" not in text
