"""Unpack the Kubernetes JSON schemas of one Kubernetes version from a kubernetes-validate
wheel and make them usable by kubeconform offline.

kubernetes-validate's schemas point at shared definitions with server-relative references
(``"$ref": "/api/_definitions.json#/$defs/..."``) and carry ``https://kubernetes.io/...``
``$id``s, so a validator resolving them would go to the network (or fail). This rewrites every
such reference and every ``$id`` to an absolute ``file://`` URL inside the output tree.

usage: python rewrite_schemas.py WHEEL OUT_DIR [VERSION...]
       VERSION like v1.37.0; default: every version in the wheel.
Writes OUT_DIR/<version>-local[-strict]/*.json (the layout kubeconform's
``{{ .NormalizedKubernetesVersion }}-local{{ .StrictSuffix }}`` template expects).
"""

from __future__ import annotations

import json
import re
import sys
import zipfile
from pathlib import Path
from typing import Any

PREFIX = "kubernetes_validate/kubernetes-json-schema/"
SERVER_RELATIVE = "/api/"


def rewrite(node: Any, dir_url: str, self_url: str) -> Any:
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str) and value.startswith(SERVER_RELATIVE):
                value = dir_url + value[len(SERVER_RELATIVE) :]
            elif key == "$id" and isinstance(value, str):
                value = self_url
            out[key] = rewrite(value, dir_url, self_url)
        return out
    if isinstance(node, list):
        return [rewrite(v, dir_url, self_url) for v in node]
    return node


def main(argv: list[str]) -> int:
    wheel, out_dir, versions = Path(argv[1]), Path(argv[2]).resolve(), set(argv[3:])
    version_re = re.compile(r"^(v\d+\.\d+\.\d+)-local(-strict)?$")
    written = 0
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            if not name.startswith(PREFIX) or not name.endswith(".json"):
                continue
            rel = name[len(PREFIX) :]
            folder, _, filename = rel.partition("/")
            m = version_re.match(folder)
            if m is None or "/" in filename or (versions and m.group(1) not in versions):
                continue
            target = out_dir / folder / filename
            target.parent.mkdir(parents=True, exist_ok=True)
            doc = json.loads(zf.read(name))
            dir_url = target.parent.as_uri() + "/"
            target.write_text(json.dumps(rewrite(doc, dir_url, target.as_uri())))
            written += 1
    if written == 0:
        print(
            f"no schemas found in {wheel} for {sorted(versions) or 'any version'}", file=sys.stderr
        )
        return 1
    # no server-relative reference may survive
    leftovers = [
        p for p in out_dir.rglob("*.json") if f'"$ref": "{SERVER_RELATIVE}' in p.read_text()
    ]
    if leftovers:
        print(f"unrewritten $refs remain in {leftovers[:3]}", file=sys.stderr)
        return 1
    print(f"rewrote {written} schema files into {out_dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
