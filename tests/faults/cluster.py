"""The deployment the fault suite owns: the one ``memledger cluster up`` and ``bench scale`` run
(``memledger_cli.cluster``), named here for the suite's modules."""

from memledger_cli.cluster import Cluster, Engine, Service, Topology, command

__all__ = ["Cluster", "Engine", "Service", "Topology", "command"]
