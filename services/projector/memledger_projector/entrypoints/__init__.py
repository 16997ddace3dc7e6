"""How events reach the projector: the JetStream consumer."""
