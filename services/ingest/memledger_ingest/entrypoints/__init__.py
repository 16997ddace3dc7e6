"""How commands reach ingest: HTTP, gRPC and the NATS intake, and the problems they answer."""
