"""The `memledger` command: runs the services, the embedded engines, and operator tools."""
