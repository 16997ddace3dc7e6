"""The gRPC API's generated code: ``memledger_schemas.grpc.v1`` (``ingest_pb2``, ``query_pb2``
and their ``_pb2_grpc`` stubs), built from ``schemas/proto/memledger/v1/*.proto`` by the
install step (``make install``; by hand: ``python -m memledger_schemas.grpc.codegen``) and not
committed. Nothing is imported here, so the code generator runs before its output exists."""
