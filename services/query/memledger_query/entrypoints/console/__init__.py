"""The operator console: a page and its script, served as they are (no build step), which
read memledger through its public HTTP API with the operator's own key and grants."""
