"""The events' header lines are read by ``bus.HeadersClient`` exactly as nats-py reads them."""

from nats.aio.client import Client

from memledger_platform.bus import HeadersClient

EVENT = (b"Nats-Msg-Id: 019ac0f2-7b1c-7c3e-9a8e-2f0d7a1b2c3d\r\nMemledger-Position: 123456\r\n"
         b"Memledger-Event-Type: memory.embedded\r\nMemledger-Schema-Version: 1\r\n"
         b"traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\n\r\n")


def test_an_events_headers_read_as_the_library_reads_them() -> None:
    assert HeadersClient._parse_header_lines(EVENT) == Client._parse_header_lines(EVENT)
    assert HeadersClient._parse_header_lines(EVENT)["Memledger-Position"] == "123456"


def test_odd_lines_read_as_the_library_reads_them() -> None:
    odd = [b"", b"\r\n", b"no colon\r\n", b"Name:Value", b"Name:\tValue \r\n", b": empty name",
           b"Two Words: x", b"Caf\xc3\xa9: not ascii", b"Ok: caf\xc3\xa9 \xff bad utf-8",
           b"A: 1\r\nA: 2", b"  Padded  :  v  ", b"Colon: a: b", b"Dup: x\r\n\r\nAfter: y"]
    for raw in odd:
        assert HeadersClient._parse_header_lines(raw) == Client._parse_header_lines(raw), raw


def test_every_ascii_character_in_a_name_judged_as_the_library_judges_it() -> None:
    # Names with whitespace are dropped: str.isspace's whitespace, which is more than " \t".
    for code in range(128):
        raw = b"Na" + bytes([code]) + b"me: v\r\nOther: w"
        assert HeadersClient._parse_header_lines(raw) == Client._parse_header_lines(raw), code
