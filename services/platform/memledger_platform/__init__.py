"""Infrastructure shared by memledger services: settings, clock, ids, event store, engines."""
