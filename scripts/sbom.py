"""A CycloneDX SBOM (JSON, spec 1.6) of a Python environment, from the inventory
scripts/python_inventory.py printed inside it: every installed distribution with its version,
package URL and declared license, and who requires whom. `make release` feeds it the image's own
environment (scripts/release.sh), so the SBOM lists what the image holds, not what a
requirements file meant it to.

    podman run -i --rm --entrypoint python IMAGE -I - < scripts/python_inventory.py > inventory.json
    python scripts/sbom.py --name txnwatch --version 0.2.0 --image IMAGE inventory.json > sbom.cdx.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from cyclonedx.model.bom import Bom
from cyclonedx.model.component import Component, ComponentType
from cyclonedx.model.license import DisjunctiveLicense, LicenseExpression
from cyclonedx.output import make_outputter
from cyclonedx.schema import OutputFormat, SchemaVersion
from packageurl import PackageURL
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

SPEC = SchemaVersion.V1_6
OWN_TOOLS = {"pip", "setuptools", "wheel"}     # the venv's installers, not what the image runs


def _licenses(meta: Mapping[str, Any]) -> list:
    """The declared license: an SPDX expression (metadata 2.4), else a short License field,
    else the OSI classifiers; none when the distribution declares none."""
    if meta["license_expression"]:
        return [LicenseExpression(meta["license_expression"])]
    text = meta["license"].strip()
    if text and "\n" not in text and len(text) <= 100:
        return [DisjunctiveLicense(name=text)]
    return [DisjunctiveLicense(name=c.rsplit(" :: ", 1)[-1]) for c in meta["classifiers"]
            if c.startswith("License :: OSI Approved :: ")]


def _component(meta: Mapping[str, Any]) -> Component:
    name = canonicalize_name(meta["name"])
    return Component(name=meta["name"], version=meta["version"], type=ComponentType.LIBRARY,
                     bom_ref=f"pypi:{name}@{meta['version']}", licenses=_licenses(meta),
                     description=meta["summary"] or None,
                     purl=PackageURL(type="pypi", name=name, version=meta["version"]))


def _requires(meta: Mapping[str, Any], environment: Mapping[str, str]) -> Iterable[str]:
    """Names this distribution requires in this environment (extras it was not installed with
    are not evaluated as requested: their markers say `extra == ...`)."""
    for text in meta["requires_dist"]:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if req.marker is None or req.marker.evaluate({**environment, "extra": ""}):
            yield canonicalize_name(req.name)


def build_bom(inventory: Mapping[str, Any], name: str, version: str, image: str) -> Bom:
    environment = inventory["environment"]
    metas = [d for d in inventory["installed"] if canonicalize_name(d["name"]) not in OWN_TOOLS]
    components = {canonicalize_name(m["name"]): _component(m) for m in metas}
    root = Component(name=name, version=version, type=ComponentType.CONTAINER, bom_ref=f"image:{image}",
                     description=f"the {name} container image {image}: its Python environment")
    bom = Bom()
    bom.metadata.component = root
    for c in components.values():
        bom.components.add(c)
    requested = {canonicalize_name(d["name"]) for d in metas if d["requested"]}
    bom.register_dependency(root, [components[n] for n in sorted(requested) if n in components])
    for meta in metas:
        own = components[canonicalize_name(meta["name"])]
        bom.register_dependency(own, [components[n] for n in sorted(set(_requires(meta, environment)))
                                      if n in components])
    return bom


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("inventory", help="scripts/python_inventory.py's JSON, or - for stdin")
    parser.add_argument("--name", required=True)
    parser.add_argument("--version", required=True)
    parser.add_argument("--image", required=True, help="the image reference the SBOM describes")
    args = parser.parse_args(argv)
    raw = sys.stdin.read() if args.inventory == "-" else open(args.inventory).read()
    bom = build_bom(json.loads(raw), args.name, args.version, args.image)
    sys.stdout.write(make_outputter(bom, OutputFormat.JSON, SPEC).output_as_string(indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
