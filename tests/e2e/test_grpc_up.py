"""`memledger up` serves the gRPC API beside HTTP: a write over gRPC is read back over both."""

import json
import re

import grpc
import httpx

from memledger_schemas.grpc.v1 import ingest_pb2, ingest_pb2_grpc, query_pb2, query_pb2_grpc
from tests.e2e.conftest import Running

TENANT = (("x-memledger-tenant", "default"),)


def test_up_prints_its_grpc_address_and_answers_there_as_over_http(memledger: Running) -> None:
    address = re.search(r"gRPC API\s+(\S+)", "".join(memledger.output))
    assert address, memledger.output
    with grpc.insecure_channel(address.group(1)) as channel:
        writes, reads = ingest_pb2_grpc.IngestStub(channel), query_pb2_grpc.QueryStub(channel)
        writes.Submit(ingest_pb2.CommandRequest(
            command="create_space", json_body='{"space_id": "demo"}'), metadata=TENANT)
        wrote = writes.Submit(ingest_pb2.CommandRequest(command="assert_memory", json_body=(
            json.dumps({"space_id": "demo", "kind": "fact", "content": "The sky is blue"}))),
            metadata=TENANT, timeout=10)
        answer = reads.GetItem(query_pb2.GetItemRequest(
            space_id="demo", item_id=wrote.ids["item_id"], min_position=wrote.position,
            wait_ms=10_000), metadata=TENANT, timeout=15)
    assert (answer.item.content, answer.basis.position) == ("The sky is blue", wrote.position)
    over_http = httpx.get(f"{memledger.url}/v1/spaces/demo/items/{wrote.ids['item_id']}",
                          timeout=10).json()
    assert over_http["item"]["content"] == answer.item.content
