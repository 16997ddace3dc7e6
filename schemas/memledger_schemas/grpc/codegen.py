"""Generates ``memledger_schemas.grpc.v1`` from the protos (run by the Makefile's install step).

The protos live at ``schemas/proto/memledger/v1/``; they are compiled under the virtual path
``memledger_schemas/grpc/v1/`` so that the generated modules import each other by their real
package (``from memledger_schemas.grpc.v1 import query_pb2``). Type stubs come with them:
``.pyi`` for the messages (protoc) and for the services (mypy-protobuf, when installed).
"""

import sys
from importlib import resources
from pathlib import Path

PACKAGE = "memledger_schemas/grpc"
SCHEMAS = Path(__file__).resolve().parents[2]
PROTOS = SCHEMAS / "proto" / "memledger"
OUTPUT = SCHEMAS
MARKER = '"""Generated from schemas/proto/memledger/v1 by memledger_schemas.grpc.codegen."""\n'


def proto_files() -> list[str]:
    """The protos as protoc sees them (virtual paths), sorted."""
    return sorted(f"{PACKAGE}/{p.relative_to(PROTOS).as_posix()}"
                  for p in PROTOS.glob("v1/*.proto"))


def generate(output: Path = OUTPUT) -> list[Path]:
    """Compile every proto into ``output/memledger_schemas/grpc/v1``; return the files written.
    Raises ``RuntimeError`` with protoc's exit status if compilation fails."""
    from grpc_tools import protoc  # type: ignore[import-untyped]

    includes = str(resources.files("grpc_tools") / "_proto")  # google/protobuf/*.proto
    args = ["protoc", f"-I{PACKAGE}={PROTOS}", f"-I{includes}", f"--python_out={output}",
            f"--pyi_out={output}", f"--grpc_python_out={output}"]
    plugin = Path(sys.executable).parent / "protoc-gen-mypy_grpc"
    if plugin.exists():
        args += [f"--plugin=protoc-gen-mypy_grpc={plugin}", f"--mypy_grpc_out={output}"]
    target = output / PACKAGE / "v1"
    target.mkdir(parents=True, exist_ok=True)
    status = protoc.main([*args, *proto_files()])
    if status != 0:
        raise RuntimeError(f"protoc failed with status {status}")
    # Last, so a Makefile rule that depends on it is only satisfied by a complete build.
    (target / "__init__.py").write_text(MARKER)
    return sorted(p for p in target.iterdir() if p.is_file())


if __name__ == "__main__":
    written = generate()
    print(f"memledger: generated {len(written)} gRPC files in {written[0].parent}")
