"""Infrastructure shared by memledger services: settings, clock, ids, event store, engines."""

import importlib
import importlib.util
import sys
import types

import memledger_schemas  # noqa: F401  (gRPC's fork setting, before grpc is imported)


class _ImportedOnFirstUse(types.ModuleType):
    """Stands in ``sys.modules`` for a module not imported yet: ``import`` of it returns this,
    and the first attribute read imports the module, which replaces this there."""

    def __getattr__(self, attr: str) -> object:
        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]
        return getattr(importlib.import_module(self.__name__), attr)


def _import_on_first_use(name: str) -> None:
    """``name`` stands in ``sys.modules`` until it is used, if it is installed and not yet
    imported (one that is not installed stays absent: ``import`` of it still fails)."""
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is not None:
        stand_in = _ImportedOnFirstUse(name)
        stand_in.__spec__ = spec  # what introspection (``find_spec``) finds, as for the module
        sys.modules[name] = stand_in


# nats-py imports aiohttp as it is imported, for its WebSocket transport alone (ws:// URLs):
# about 0.2 s of CPU in each of the processes a start runs, all of which import nats, and
# every first-party package imports this one before it.
_import_on_first_use("aiohttp")
