"""JSON Schema snapshots of every published event version and of the envelope.

``python -m memledger_schemas.snapshots --write`` refreshes ``schemas/json``; a test fails when
a committed snapshot differs from the models, so a published version cannot change silently
(change it by adding a version with an upcaster instead).
"""

import argparse
import json
from pathlib import Path
from typing import Any

from memledger_schemas.envelope import EventEnvelope
from memledger_schemas.events import CURRENT, HISTORIC, Payload

SNAPSHOT_DIR = Path(__file__).resolve().parent.parent / "json"


def snapshot_name(model: type[Payload]) -> str:
    return f"{model.event_type}.v{model.schema_version}.json"


def expected() -> dict[str, dict[str, Any]]:
    """File name → schema, for every event version and the envelope."""
    schemas = {snapshot_name(m): _schema(m) for m in (*CURRENT, *HISTORIC)}
    schemas["envelope.json"] = EventEnvelope.model_json_schema()
    return schemas


def _schema(model: type[Payload]) -> dict[str, Any]:
    schema = model.model_json_schema()
    schema["x-event-type"] = model.event_type
    schema["x-schema-version"] = model.schema_version
    return schema


def render(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def write(directory: Path = SNAPSHOT_DIR) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, schema in expected().items():
        path = directory / name
        path.write_text(render(schema))
        written.append(path)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", action="store_true", help="rewrite the snapshots")
    if parser.parse_args().write:
        for path in write():
            print(path)


if __name__ == "__main__":
    main()
