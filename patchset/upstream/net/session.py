"""``requests`` sessions whose connections a request's watchdog can stop.

The adapter's connection classes register with the open scope (``scope.watch``) each time
they send a request, through a direct connection or an HTTP proxy, so the scope's watchdog
knows which sockets to shut down at the deadline. Without it a read blocked deep in ``urllib3``
could not be stopped from outside.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from patchset.upstream.net.scope import watch

if TYPE_CHECKING:  # requests loads with the first request, not with this module
    import requests

__all__ = ["session"]

_adapter_cls: Any = None


def _adapter() -> Any:
    """An ``HTTPAdapter`` whose connections register with the open scope when they send."""
    global _adapter_cls
    if _adapter_cls is None:
        from requests.adapters import HTTPAdapter
        from urllib3.connection import HTTPConnection, HTTPSConnection
        from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

        class WatchedHTTP(HTTPConnection):
            def putrequest(self, *args: Any, **kwargs: Any) -> None:
                watch(self)
                super().putrequest(*args, **kwargs)

        class WatchedHTTPS(HTTPSConnection):
            def putrequest(self, *args: Any, **kwargs: Any) -> None:
                watch(self)
                super().putrequest(*args, **kwargs)

        class HTTPPool(HTTPConnectionPool):
            ConnectionCls = WatchedHTTP

        class HTTPSPool(HTTPSConnectionPool):
            ConnectionCls = WatchedHTTPS

        pools = {"http": HTTPPool, "https": HTTPSPool}

        class WatchedAdapter(HTTPAdapter):
            def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
                super().init_poolmanager(*args, **kwargs)
                self.poolmanager.pool_classes_by_scheme = pools

            def proxy_manager_for(self, proxy: str, **kwargs: Any) -> Any:
                manager = super().proxy_manager_for(proxy, **kwargs)
                if not proxy.lower().startswith("socks"):
                    manager.pool_classes_by_scheme = pools
                return manager

        _adapter_cls = WatchedAdapter
    return _adapter_cls


def session(*, retries: Any = None, trust_env: bool = True, user_agent: str | None = None) -> requests.Session:
    """A ``requests.Session`` whose connections this module can stop. ``retries``: urllib3's
    ``Retry`` (default: none); ``trust_env=False`` ignores proxy settings and ``.netrc``."""
    import requests

    s = requests.Session()
    s.trust_env = trust_env
    if user_agent:
        s.headers["User-Agent"] = user_agent
    cls = _adapter()
    adapter = cls(max_retries=retries) if retries is not None else cls()
    s.mount("http://", adapter)
    s.mount("https://", adapter)
    return s
