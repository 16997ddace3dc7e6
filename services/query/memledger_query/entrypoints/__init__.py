"""How reads reach query: the HTTP routes, gRPC and the operator console."""
