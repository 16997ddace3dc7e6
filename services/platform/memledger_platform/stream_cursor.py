"""Where the events stream stands, read from its last message: what the relay resumes from,
and what ingest's health, ``memledger status`` and ``memledger verify`` report as relayed."""

from dataclasses import dataclass

from nats.js import JetStreamContext
from nats.js.api import RawStreamMsg
from nats.js.errors import NotFoundError

from memledger_schemas.subjects import HDR_MSG_ID, HDR_POSITION, Subjects


@dataclass
class Cursor:
    """Where the stream stands: the last relayed position, the stream's last sequence and the
    id of the event in that last message ("" for an empty stream)."""

    position: int = 0
    sequence: int = 0
    event_id: str = ""


class RelayOutOfSync(Exception):
    """The stream did not accept a publish as the next message; re-read where it stands."""


async def stream_cursor(js: JetStreamContext, subjects: Subjects) -> Cursor:
    """Where the events stream stands: its last sequence, and the position and event id in its
    last message (what has been relayed). Raises ``RelayOutOfSync`` if that message is not the
    relay's."""
    info = await js.stream_info(subjects.events_stream)
    last = info.state.last_seq
    if info.state.messages == 0:
        return Cursor(0, last)
    msg = await _newest_message(js, subjects.events_stream, last)
    position = (msg.headers or {}).get(HDR_POSITION)
    if position is None:
        raise RelayOutOfSync(
            f"the last message of {subjects.events_stream} (sequence {msg.seq}, subject "
            f"{msg.subject}) was not published by the relay; only the relay may publish "
            "there (fence it with NATS permissions) and that message must be removed")
    # If newer messages were deleted (a foreign one an operator removed), the stream's last
    # sequence is past this message and its last message id is not this event's: chain the
    # next publish on the sequence alone.
    event_id = (msg.headers or {}).get(HDR_MSG_ID, "") if msg.seq == last else ""
    return Cursor(int(position), last, event_id)


async def _newest_message(js: JetStreamContext, stream: str, last: int,
                          search: int = 1_000) -> RawStreamMsg:
    """The newest message still in the stream, at ``last`` or (if messages were deleted)
    up to ``search`` sequences before it."""
    for seq in range(last, max(0, last - search), -1):
        try:
            return await js.get_msg(stream, seq=seq)
        except NotFoundError:
            continue
    raise RelayOutOfSync(f"no message in the last {search} sequences of {stream}")
