"""``memledger cluster up``: a clustered deployment on loopback, every service a process of its own
(``memledger_cli.cluster``): a JetStream cluster of three nats-servers (streams replicated on
each), PostgreSQL, the relay, the projector, the vectors service, the enricher, and ingest and
query in as many replicas as asked. It prints where each listens and stops everything on Ctrl-C
or SIGTERM. The data lives under ``$MEMLEDGER_HOME/cluster`` (apart from ``memledger up``'s)."""

import argparse
import shlex
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from memledger_cli.cluster import Cluster, ClusterError, Topology
from memledger_cli.embedded import private_home
from memledger_cli.status import redact
from memledger_platform.engines.credentials import write_private
from memledger_platform.keyring_postgres import ensure_master_key
from memledger_platform.settings import Settings

ENV_FILE = "operator.env"
"""Under the cluster's home: the settings an operator command (``verify``, ``status``) needs."""
MAX_REPLICAS = 8


def add_parser(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    cluster = commands.add_parser("cluster", help="a clustered deployment on loopback "
                                  "(`cluster up`: 3 NATS nodes, replicas of ingest and query)")
    actions = cluster.add_subparsers(dest="cluster_command", required=True, metavar="ACTION")
    up = actions.add_parser("up", help="start every service as its own process; Ctrl-C stops")
    up.add_argument("--ingest", type=_replicas, default=2, help="ingest replicas (default 2)")
    up.add_argument("--query", type=_replicas, default=2, help="query replicas (default 2)")
    up.add_argument("--nats-nodes", type=_nodes, default=3,
                    help="nats-servers in the JetStream cluster (default 3; odd)")
    up.set_defaults(handler=_cluster_up)


def _replicas(text: str) -> int:
    count = int(text)
    if not 1 <= count <= MAX_REPLICAS:
        raise argparse.ArgumentTypeError(f"replicas: between 1 and {MAX_REPLICAS}, not {count}")
    return count


def _nodes(text: str) -> int:
    count = int(text)
    if count < 1 or count % 2 == 0:
        raise argparse.ArgumentTypeError(f"nats-nodes: an odd number (a quorum), not {count}")
    return count


def _cluster_up(args: argparse.Namespace, settings: Settings) -> int:
    topology = Topology(nats_nodes=args.nats_nodes, ingest_replicas=args.ingest,
                        query_replicas=args.query)
    home = private_home(settings) / "cluster"
    home.mkdir(mode=0o700, exist_ok=True)
    stop = threading.Event()

    def stopping(signum: int, _: FrameType | None) -> None:
        stop.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, stopping)
    print(f"memledger: starting a cluster ({topology.nats_nodes} NATS nodes, "
          f"{topology.ingest_replicas} ingest, {topology.query_replicas} query; data in {home})"
          " ...", file=sys.stderr, flush=True)
    cluster = Cluster(home, topology, embedder=settings.embedder, auth=settings.auth_required,
                      master_key=ensure_master_key(home))
    try:
        cluster.start()
        write_private(home / ENV_FILE, operator_env(cluster))
        print(banner(cluster), flush=True)
        stop.wait()
    except ClusterError as error:
        print(f"memledger: the cluster did not start: {error}", file=sys.stderr)
        return 1
    finally:
        print("memledger: stopping the cluster ...", file=sys.stderr, flush=True)
        cluster.close()
        (home / ENV_FILE).unlink(missing_ok=True)
    print("memledger: stopped", file=sys.stderr, flush=True)
    return 0


def operator_env(cluster: Cluster) -> str:
    """The shell assignments an operator command against ``cluster`` runs with."""
    env = cluster.env()
    keep = ("MEMLEDGER_MODE", "MEMLEDGER_POSTGRES_DSN", "MEMLEDGER_NATS_URL", "MEMLEDGER_HOME",
            "MEMLEDGER_MASTER_KEY", "MEMLEDGER_NATS_STREAM_REPLICAS", "MEMLEDGER_API_KEY",
            "MEMLEDGER_EMBEDDER", "MEMLEDGER_AUTH")
    return "".join(f"{name}={shlex.quote(env[name])}\n" for name in keep if name in env)


def banner(cluster: Cluster) -> str:
    """Where every service listens (passwords left out: they are in the env file)."""
    lines = [f"\nmemledger cluster is up ({cluster.topology.nats_nodes} NATS nodes)"]
    for name, service in cluster.services.items():
        port = service.env.get("MEMLEDGER_HTTP_PORT")
        where = (f"http://127.0.0.1:{port}   gRPC 127.0.0.1:{service.env['MEMLEDGER_GRPC_PORT']}"
                 if port else "(no port: a worker)")
        lines.append(f"  {name:<11}{where}   log {service.log}")
    lines += [f"  postgres   {redact(cluster.dsn)}",
              *(f"  nats       {redact(url)}" for url in cluster.nats_url.split(",")),
              f"operator commands (verify, status, admin): set -a; . "
              f"{Path(cluster.home) / ENV_FILE}; set +a; memledger verify",
              "Ctrl-C stops every process of the cluster."]
    if cluster.api_key:
        lines.insert(-2, f"  API key    {cluster.api_key}   (admin of tenant {cluster.TENANT})")
    return "\n".join(lines) + "\n"
