"""`hermes-meter mcp` driven by the Model Context Protocol's own Python client
(`mcp` from the package index) over stdio, as an MCP client runs it: the
tools it lists, answers equal to the command line's, and hostile arguments
answered as tool errors while the server keeps serving."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from conftest import FIXTURES
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

SESSION = "20261130_013759_e4a976"  # delegate_sync: a session with a subagent


def _cli(home: Path, *args: str) -> str:
    p = subprocess.run(
        [sys.executable, "-m", "hermes_meter.cli", "--home", str(home), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    return p.stdout


async def _session(home: Path, calls: list[tuple[str, dict]]) -> tuple[list[str], list]:
    server = StdioServerParameters(
        command=sys.executable, args=["-m", "hermes_meter.cli", "--home", str(home), "mcp"]
    )
    async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = sorted(t.name for t in (await session.list_tools()).tools)
        results = []
        for name, arguments in calls:
            try:
                results.append(await session.call_tool(name, arguments))
            except Exception as e:  # noqa: BLE001 - a protocol error is an answer too
                results.append(e)
        return tools, results


def _json(result) -> dict:
    assert not result.is_error, result
    return json.loads(result.content[0].text)


def _error(result) -> str:
    assert result.is_error, result
    return result.content[0].text


def test_an_mcp_client_reads_what_the_command_line_reads_and_hostile_arguments_get_tool_errors(
    tmp_path,
) -> None:
    home = tmp_path / "meter"
    (home).mkdir()
    (home / "pricing.toml").write_text('[models."mock-model"]\ninput = 3.0\noutput = 15.0\n')
    _cli(home, "replay", *(str(FIXTURES / f"{n}.jsonl") for n in ("delegate_sync", "failonce", "multi_turn")))
    report = json.loads(_cli(home, "report", "--json"))
    trace = json.loads(_cli(home, "trace", SESSION, "--json"))
    calls = [
        ("report", {}),
        ("spend", {"session_id": SESSION}),
        ("session_trace", {"session_id": SESSION}),
        ("search_sessions", {"model": "MOCK", "sort": "cost", "limit": 1_000_000_000}),
        ("search_sessions", {"platform": "no-such\x1b[2J"}),
        # Hostile or wrong: each a tool error, and the server goes on.
        ("session_trace", {"session_id": "x" * 10_000}),
        ("session_trace", {"session_id": "no-such-session\x1b]0;pwned\x07"}),
        ("report", {"since": "the day before yesterday"}),
        ("report", {"since": "1d", "until": "2d"}),
        ("search_sessions", {"sort": "'; DROP TABLE runs; --"}),
        ("spend", {"session_id": "s", "bogus": 1}),
        ("report", {"top": 3}),
        ("find_sessions", {"tool": "DELEGATE", "since": "2026-11-01"}),
        ("find_sessions", {"failed": True, "since": "2026-11-01", "until": "2099-01-01"}),
        ("find_sessions", {}),
        ("advise", {"since": "2026-11-01"}),
        ("advise", {"since": "yesterday-ish"}),
    ]
    tools, results = asyncio.run(_session(home, calls))
    assert tools == ["advise", "find_sessions", "report", "search_sessions", "session_trace", "spend"]
    got = _json(results[0])
    assert got["totals"] == report["totals"], (got["totals"], report["totals"])
    spend = _json(results[1])
    assert spend["schema"] == "hermes-meter.agent.v1" and spend["session"]["session_id"] == SESSION
    assert spend["session"]["subagents"] == 1
    assert _json(results[2]) == trace
    found = _json(results[3])
    # Every session matches (the model is mock-model in any case); the limit is capped.
    assert found["totals"]["sessions"] == report["totals"]["sessions"] == len(found["sessions"]) > 1
    assert found["sessions"][0]["cost_usd"] >= found["sessions"][-1]["cost_usd"]
    assert found["filters_matched"] == {"model": ["mock-model"]}
    none = _json(results[4])
    assert none["sessions"] == [] and none["filters_matched"] == {"platform": []}
    assert "longer than 256" in _error(results[5])
    missing = _error(results[6])
    assert "no session" in missing and "\x1b" not in missing and "\x07" not in missing
    assert "cannot read" in _error(results[7])
    assert "window is empty" in _error(results[8])
    assert "sort is one of" in _error(results[9])
    # An argument no tool takes is refused (a protocol error or a tool error).
    bogus = results[10]
    assert isinstance(bogus, Exception) or bogus.is_error, bogus
    # The server still answers after all of that, and the store is whole.
    assert len(_json(results[11])["by_model"]) >= 1
    # By a tool the session ran (delegate_sync's delegate_task), and by failures (failonce's failed attempt).
    assert [s["session_id"] for s in _json(results[12])["sessions"]] == [SESSION]
    failed = _json(results[13])["sessions"]
    assert [s["session_id"] for s in failed] == ["20261130_013817_88dc56"], failed
    assert failed[0]["api_errors"] == 1
    assert "say a tool" in _error(results[14])
    advice = _json(results[15])
    assert (
        advice["schema"] == "hermes-meter.advice.v1" and advice["llm_calls"] == report["totals"]["llm_calls"]
    )
    assert advice == json.loads(_cli(home, "advise", "--since", "2026-11-01", "--json")) | {
        "until": advice["until"]
    }
    assert "cannot read" in _error(results[16])
    assert json.loads(_cli(home, "report", "--json"))["totals"] == report["totals"]


def _listen(home: Path, *args: str, env: dict | None = None) -> tuple[subprocess.Popen, str]:
    """`hermes-meter mcp --listen 127.0.0.1:0 ARGS`, and the URL it printed."""
    import os

    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hermes_meter.cli",
            "--home",
            str(home),
            "mcp",
            "--listen",
            "127.0.0.1:0",
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    line = p.stdout.readline()
    assert "listening on http://127.0.0.1:" in line, (line, p.stderr.read() if p.poll() is not None else "")
    return p, line.rsplit(" ", 1)[1].strip()


async def _http_session(url: str, headers: dict, calls: list[tuple[str, dict]]) -> tuple[list[str], list]:
    from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

    async with (
        create_mcp_http_client(headers=headers) as http,
        streamable_http_client(url, http_client=http) as (read, write, *_),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        tools = sorted(t.name for t in (await session.list_tools()).tools)
        return tools, [await session.call_tool(name, arguments) for name, arguments in calls]


def _raw(url: str, headers: dict, body: bytes = b"{}") -> int:
    """The status of one POST to `url` with `headers` (urllib: no MCP client)."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            **headers,
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_over_http_on_loopback_an_mcp_client_gets_the_same_answers_and_pages_elsewhere_get_nothing(
    tmp_path,
) -> None:
    home = tmp_path / "meter"
    home.mkdir()
    _cli(home, "replay", str(FIXTURES / "delegate_sync.jsonl"))
    report = json.loads(_cli(home, "report", "--json"))
    server, url = _listen(home)
    try:
        tools, results = asyncio.run(
            _http_session(
                url, {}, [("report", {}), ("spend", {"session_id": SESSION}), ("session_trace", {})]
            )
        )
        assert tools == ["advise", "find_sessions", "report", "search_sessions", "session_trace", "spend"]
        assert _json(results[0])["totals"] == report["totals"]
        assert _json(results[1])["session"]["session_id"] == SESSION
        assert results[2].is_error or "session_id" in str(results[2]), results[2]
        # DNS rebinding (a host name that is not loopback), a browser page
        # (any Origin), another path and an oversized body: refused.
        assert _raw(url, {"Host": "evil.example"}) == 403
        assert _raw(url, {"Origin": "http://evil.example"}) == 403
        assert _raw(url.replace("/mcp", "/other"), {}) == 404
        assert _raw(url, {}, b"[" + b" " * (2 << 20) + b"]") == 413
        # And it still answers.
        assert asyncio.run(_http_session(url, {}, [("report", {})]))[1][0].is_error is False
    finally:
        server.terminate()
        assert server.wait(timeout=10) == 0


def test_over_http_with_a_token_every_request_needs_it_and_off_loopback_needs_one(tmp_path) -> None:
    home = tmp_path / "meter"
    home.mkdir()
    _cli(home, "replay", str(FIXTURES / "delegate_sync.jsonl"))
    server, url = _listen(home, env={"HERMES_METER_MCP_TOKEN": "s3cret-token"})
    try:
        assert _raw(url, {}) == 401
        assert _raw(url, {"Authorization": "Bearer wrong-token!"}) == 401
        tools, results = asyncio.run(
            _http_session(url, {"Authorization": "Bearer s3cret-token"}, [("report", {})])
        )
        assert "report" in tools and not results[0].is_error
    finally:
        server.terminate()
        server.wait(timeout=10)
    # Off loopback without a token: refused before it listens, saying why.
    p = subprocess.run(
        [sys.executable, "-m", "hermes_meter.cli", "--home", str(home), "mcp", "--listen", "0.0.0.0:0"],
        capture_output=True,
        text=True,
        timeout=30,
        env={k: v for k, v in __import__("os").environ.items() if k != "HERMES_METER_MCP_TOKEN"},
    )
    assert p.returncode != 0 and "not loopback" in p.stderr and "HERMES_METER_MCP_TOKEN" in p.stderr, p.stderr
