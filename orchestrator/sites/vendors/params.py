"""``python -m orchestrator.sites.vendors.params --base B.yaml --set a.b=V ... --output P.yaml``.

The Cerebras model zoo takes everything about a run from one params YAML. The run's values
(batch size, model size, precision, number of steps) are written over the model zoo's own file
for the model, key by dotted key, into the run directory; the zoo's ``run.py`` then reads that.
Each ``V`` is read as JSON when it parses (numbers, true/false, lists), else as text. Needs
PyYAML, which the model zoo's environment has.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Sequence


def apply(doc: dict[str, Any], assignments: Sequence[str]) -> dict[str, Any]:
    for item in assignments:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set {item!r}: expected KEY.PATH=VALUE")
        try:
            value: Any = json.loads(text)
        except ValueError:
            value = text
        node = doc
        *parents, leaf = key.split(".")
        for part in parents:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        node[leaf] = value
    return doc


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m orchestrator.sites.vendors.params", allow_abbrev=False)
    parser.add_argument("--base", required=True, help="the model zoo's params YAML for the model")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY.PATH=VALUE")
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    import yaml  # the model zoo's environment has PyYAML

    try:
        with open(args.base, encoding="utf-8") as handle:
            doc = yaml.safe_load(handle) or {}
        apply(doc, args.sets)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        print(f"orch params: {exc}", file=sys.stderr)
        return 2
    with open(args.output, "w", encoding="utf-8") as handle:
        yaml.safe_dump(doc, handle, sort_keys=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
