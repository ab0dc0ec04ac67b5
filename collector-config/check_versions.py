"""The stack's versions agree everywhere (collector-config/versions.env):
the images docker-compose.yaml runs, the Collector and Jaeger modules the
end-to-end tests build, and the Jaeger image beside its module release.
Prints what disagrees; exits 1 if anything does."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def pins() -> dict[str, str]:
    out = {}
    for line in (ROOT / "collector-config" / "versions.env").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def module_versions(go_mod: Path) -> dict[str, str]:
    found = {}
    for m in re.finditer(r"^\s*(?:require\s+)?(\S+)\s+v(\d[^\s]*)", go_mod.read_text(), re.M):
        found[m.group(1)] = m.group(2)
    return found


def main() -> int:
    p = pins()
    bad = []
    compose = yaml.safe_load((ROOT / "collector-config" / "docker-compose.yaml").read_text())
    images = {name: svc.get("image", "") for name, svc in compose["services"].items()}
    want = {
        "otel-collector": f"otel/opentelemetry-collector-contrib:{p['OTELCOL_CONTRIB']}",
        "jaeger": f"jaegertracing/jaeger:{p['JAEGER']}",
    }
    for svc, image in want.items():
        if images.get(svc) != image:
            bad.append(f"docker-compose.yaml runs {images.get(svc)!r} as {svc}, versions.env says {image!r}")
    otelcol = module_versions(ROOT / "tools" / "otelcol" / "go.mod")
    for mod, version in otelcol.items():
        if (
            mod.startswith("go.opentelemetry.io/collector/")
            and version.startswith("0.1")
            and "memorylimiterextension" not in mod
        ):
            if version != p["OTELCOL_CORE"]:
                bad.append(f"tools/otelcol/go.mod: {mod} v{version}, versions.env says {p['OTELCOL_CORE']}")
        if (
            mod.startswith("github.com/open-telemetry/opentelemetry-collector-contrib/")
            and version != p["OTELCOL_CONTRIB"]
        ):
            bad.append(f"tools/otelcol/go.mod: {mod} v{version}, versions.env says {p['OTELCOL_CONTRIB']}")
    jaeger = module_versions(ROOT / "tools" / "jaeger" / "go.mod").get("github.com/jaegertracing/jaeger")
    if jaeger != p["JAEGER_MODULE"]:
        bad.append(f"tools/jaeger/go.mod builds jaeger v{jaeger}, versions.env says {p['JAEGER_MODULE']}")
    major, minor, patch = (int(x) for x in p["JAEGER"].split("."))
    mod_minor = int(p["JAEGER_MODULE"].split(".")[1])
    if major != 2 or minor != mod_minor - 63:
        bad.append(
            f"Jaeger v{p['JAEGER']} is not the release of module v{p['JAEGER_MODULE']} (v2.(N-63) of v1.N)"
        )
    for line in bad:
        print(line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
