"""The HTTP API's request and answer models: what query answers and the client reads."""
