"""The name of every catalogued event type, as constants: what code compares and routes on.

A member's value is the stable ``event_type`` string stored in the envelope and used in NATS
subjects; ``tests/unit/test_event_types.py`` holds it equal to the catalogue's.
"""

from enum import StrEnum


class EventType(StrEnum):
    SPACE_CREATED = "space.created"
    SPACE_POLICY_SET = "space.policy_set"
    SPACE_ARCHIVED = "space.archived"
    AGENT_REGISTERED = "agent.registered"
    SESSION_STARTED = "session.started"
    SESSION_ENDED = "session.ended"
    MESSAGE_APPENDED = "conversation.message_appended"
    MESSAGE_EMBEDDED = "conversation.message_embedded"
    MEMORY_ASSERTED = "memory.asserted"
    MEMORY_REVISED = "memory.revised"
    MEMORY_SUPERSEDED = "memory.superseded"
    MEMORY_RETRACTED = "memory.retracted"
    MEMORY_REAFFIRMED = "memory.reaffirmed"
    MEMORY_ARCHIVED = "memory.archived"
    MEMORY_PROMOTED = "memory.promoted"
    MEMORY_MERGED = "memory.merged"
    IMPORTANCE_LEARNED = "memory.importance_learned"
    MERGE_SUGGESTED = "memory.merge_suggested"
    TRIPLE_CLAIMED = "triple.claimed"
    MEMORY_EMBEDDED = "memory.embedded"
    ENTITIES_EXTRACTED = "memory.entities_extracted"
    PREFERENCE_EXTRACTED = "preference.extracted"
    ENTITY_UPSERTED = "entity.upserted"
    RELATION_ASSERTED = "relation.asserted"
    RELATION_RETRACTED = "relation.retracted"
    FEEDBACK_RECORDED = "feedback.recorded"
    RETRIEVAL_PERFORMED = "retrieval.performed"
    THEME_FORMED = "theme.formed"
    THEME_UPDATED = "theme.updated"
    SUBJECT_ERASED = "subject.erased"
