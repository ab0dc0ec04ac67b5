"""The price Hermes itself knows for a model, without any network I/O.

Called by the native binding, on the agent thread, for a model neither the
user's pricing file nor hermes-meter's built-in table knows, at most once a
minute per model. Hermes's own ``get_pricing_entry`` may fetch model lists
over HTTP, so it is never called; this composes its pure parts over the
metadata Hermes already fetched in this process (see
notes/hermes-0.19.0-notes.md, section 3). These are private Hermes names, so
any failure means "no price".
"""

from __future__ import annotations

from typing import Any


def lookup(model: str, provider: str | None, base_url: str | None) -> dict[str, float] | None:
    """USD per million tokens: ``{"input", "output", "cache_read"?, "cache_write"?}``, or None."""
    try:
        from agent import model_metadata as mm
        from agent import usage_pricing as up
    except Exception:
        return None
    try:
        route = up.resolve_billing_route(model, provider=provider, base_url=base_url)
        if route.billing_mode == "subscription_included":
            return {"input": 0.0, "output": 0.0, "cache_read": 0.0, "cache_write": 0.0}
        entry = None
        if route.provider == "openrouter":
            metadata = getattr(mm, "_model_metadata_cache", None) or {}
            entry = up._pricing_entry_from_metadata(
                metadata, route.model, source_url="", pricing_version="openrouter-models-api"
            )
        elif route.base_url:
            metadata = _endpoint_metadata(mm, route.base_url)
            entry = up._pricing_entry_from_metadata(
                metadata, route.model, source_url="", pricing_version="openai-compatible-models-api"
            )
        if entry is None:
            entry = up._lookup_official_docs_pricing(route)
        return _per_million(entry)
    except Exception:
        return None


def _endpoint_metadata(mm: Any, base_url: str) -> dict:
    """The model list Hermes fetched from a custom endpoint, without I/O.

    Hermes 0.19 - 0.21 key ``_endpoint_model_metadata_cache`` by the
    normalized URL; main keys it by ``(url, key fingerprint)``
    (``agent/model_metadata.py``, ``_endpoint_memo_key``), one entry per
    credential. The hook does not say which key a call used; every entry of
    one URL lists the same endpoint's models, so the newest one is used."""
    cache = getattr(mm, "_endpoint_model_metadata_cache", None) or {}
    normalized = mm._normalize_base_url(base_url)
    found = cache.get(normalized)
    if found:
        return found
    times = getattr(mm, "_endpoint_model_metadata_cache_time", None) or {}
    keyed = [k for k in list(cache) if isinstance(k, tuple) and k and k[0] == normalized]
    if not keyed:
        return {}
    return cache.get(max(keyed, key=lambda k: times.get(k, 0.0))) or {}


def _per_million(entry: Any) -> dict[str, float] | None:
    if entry is None:
        return None
    prices = {
        "input": getattr(entry, "input_cost_per_million", None),
        "output": getattr(entry, "output_cost_per_million", None),
        "cache_read": getattr(entry, "cache_read_cost_per_million", None),
        "cache_write": getattr(entry, "cache_write_cost_per_million", None),
    }
    out = {k: float(v) for k, v in prices.items() if v is not None}
    if "input" not in out or "output" not in out:
        return None
    return out
