"""What a Python environment holds, as JSON on stdout: every installed distribution's name,
version, declared license and requirements, and the environment's marker values. Standard
library only, so it runs inside any image with `python - < scripts/python_inventory.py`
(scripts/sbom.py turns it into an SBOM); read from the distributions' own METADATA files, which
newer fields (License-Expression) reach whatever pip the image has."""

import importlib.metadata
import json
import os
import platform
import sys


def _distribution(dist):
    meta = dist.metadata
    return {
        "name": meta["Name"], "version": meta["Version"], "summary": meta.get("Summary") or "",
        "license_expression": meta.get("License-Expression") or "", "license": meta.get("License") or "",
        "classifiers": meta.get_all("Classifier") or [], "requires_dist": meta.get_all("Requires-Dist") or [],
        "requested": dist.read_text("REQUESTED") is not None,
    }


def _environment():
    """PEP 508's marker values, for evaluating each requirement's marker."""
    return {
        "implementation_name": sys.implementation.name, "os_name": os.name, "sys_platform": sys.platform,
        "platform_machine": platform.machine(), "platform_system": platform.system(),
        "platform_release": platform.release(), "platform_python_implementation": platform.python_implementation(),
        "python_version": ".".join(platform.python_version_tuple()[:2]), "python_full_version": platform.python_version(),
        "implementation_version": platform.python_version(), "platform_version": platform.version(),
    }


json.dump({"python": sys.version.split()[0], "prefix": sys.prefix, "environment": _environment(),
           "installed": sorted((_distribution(d) for d in importlib.metadata.distributions()),
                               key=lambda d: d["name"].lower())}, sys.stdout, indent=1)
