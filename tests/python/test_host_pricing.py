"""The price Hermes itself knows for a custom endpoint's model."""

from __future__ import annotations

import sys
import types

import pytest
from hermes_meter import _host_pricing


@pytest.fixture
def hermes_pricing(monkeypatch):
    """agent.model_metadata and agent.usage_pricing, shaped after Hermes's
    (main: agent/model_metadata.py keys the endpoint cache by
    ``(url, "sha256:<16 hex>")`` in ``_endpoint_memo_key``)."""
    mm = types.ModuleType("agent.model_metadata")
    mm._normalize_base_url = lambda url: url.rstrip("/")
    mm._endpoint_model_metadata_cache = {}
    mm._endpoint_model_metadata_cache_time = {}
    mm._model_metadata_cache = {}
    up = types.ModuleType("agent.usage_pricing")

    def resolve_billing_route(model, provider=None, base_url=None):
        return types.SimpleNamespace(
            billing_mode="metered", provider=provider, model=model, base_url=base_url
        )

    def _pricing_entry_from_metadata(metadata, model, source_url, pricing_version):
        pricing = (metadata.get(model) or {}).get("pricing")
        if not pricing:
            return None
        return types.SimpleNamespace(
            input_cost_per_million=float(pricing["prompt"]) * 1e6,
            output_cost_per_million=float(pricing["completion"]) * 1e6,
            cache_read_cost_per_million=None,
            cache_write_cost_per_million=None,
        )

    up.resolve_billing_route = resolve_billing_route
    up._pricing_entry_from_metadata = _pricing_entry_from_metadata
    up._lookup_official_docs_pricing = lambda route: None
    agent = types.ModuleType("agent")
    agent.model_metadata, agent.usage_pricing = mm, up
    monkeypatch.setitem(sys.modules, "agent", agent)
    monkeypatch.setitem(sys.modules, "agent.model_metadata", mm)
    monkeypatch.setitem(sys.modules, "agent.usage_pricing", up)
    return mm


MODELS = {"acme-large": {"pricing": {"prompt": "0.000002", "completion": "0.000008"}}}


def test_a_custom_endpoint_priced_by_url_is_found(hermes_pricing) -> None:
    hermes_pricing._endpoint_model_metadata_cache["https://llm.acme.test/v1"] = MODELS
    price = _host_pricing.lookup("acme-large", "custom", "https://llm.acme.test/v1/")
    assert price == pytest.approx({"input": 2.0, "output": 8.0})


def test_a_custom_endpoint_keyed_by_url_and_key_fingerprint_is_found(hermes_pricing) -> None:
    cache = hermes_pricing._endpoint_model_metadata_cache
    times = hermes_pricing._endpoint_model_metadata_cache_time
    stale = {"acme-large": {"pricing": {"prompt": "0.000001", "completion": "0.000004"}}}
    cache[("https://llm.acme.test/v1", "sha256:0123456789abcdef")] = stale
    times[("https://llm.acme.test/v1", "sha256:0123456789abcdef")] = 100.0
    cache[("https://llm.acme.test/v1", "sha256:fedcba9876543210")] = MODELS
    times[("https://llm.acme.test/v1", "sha256:fedcba9876543210")] = 200.0
    cache[("https://other.test/v1", "sha256:fedcba9876543210")] = stale
    price = _host_pricing.lookup("acme-large", "custom", "https://llm.acme.test/v1")
    assert price == pytest.approx({"input": 2.0, "output": 8.0}), "the newest list of that endpoint"
    assert _host_pricing.lookup("acme-large", "custom", "https://none.test/v1") is None
