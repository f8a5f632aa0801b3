"""Real nginx, as the local rollout and canary run it (installed by scripts/system-packages.sh): devtools.proxy
started, reloaded, drained and refused a bad config with the running one kept, and devtools.canary's --apply
nginx on a running proxy. No upstream is needed: nginx itself answers 502.
"""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from devtools import canary
from devtools.proxy import Backend, NginxProxy, ProxyError, Upstream

A = Upstream(http="127.0.0.1:1000", grpc="127.0.0.1:1001")
B = Upstream(http="127.0.0.1:2000", grpc="127.0.0.1:2001")


def test_real_nginx_starts_reloads_drains_and_stops(tmp_path):
    proxy = NginxProxy(tmp_path / "proxy")
    proxy.set_backends({"stable": ([A], 9), "canary": ([B], 1)})
    with proxy:
        first = proxy.workers()
        assert first
        # Nothing listens on the upstreams: nginx itself answers 502.
        with pytest.raises(urllib.error.HTTPError) as error:
            urllib.request.urlopen(f"http://{proxy.http_url}/v2/health/ready", timeout=5)
        assert error.value.code == 502
        proxy.drain("canary")
        assert proxy.workers().isdisjoint(first)  # the old worker has exited
        reopened = NginxProxy.open(tmp_path / "proxy")
        assert (reopened.http_port, reopened.grpc_port) == (proxy.http_port, proxy.grpc_port)
        assert reopened.backends == {"stable": Backend((A,), 9), "canary": Backend((B,), 0)}
        assert "# canary" not in (tmp_path / "proxy" / "nginx.conf").read_text()
        with pytest.raises(ProxyError, match="no backend named"):
            proxy.set_weight("nope", 1)
    assert proxy.process is not None and proxy.process.returncode == 0
    assert proxy.master_pid() is None


def test_a_config_nginx_refuses_is_reported_and_the_running_one_kept(tmp_path):
    proxy = NginxProxy(tmp_path / "proxy")
    proxy.set_backends({"stable": ([A], 1)})
    with proxy:
        workers = proxy.workers()
        with pytest.raises(ProxyError, match="nginx -t -q failed"):
            proxy.set_backends({"stable": ([Upstream(http="127.0.0.1:1 bogus", grpc="x")], 1)})
        assert proxy.workers() == workers
        assert NginxProxy.open(tmp_path / "proxy").backends == proxy.backends == {"stable": Backend((A,), 1)}


def test_apply_nginx_takes_the_losing_backend_out_of_a_running_proxy(tmp_path):
    stable, candidate = Upstream("127.0.0.1:1000", "127.0.0.1:1001"), Upstream("127.0.0.1:2000", "127.0.0.1:2001")
    with NginxProxy(tmp_path / "proxy") as proxy:
        proxy.set_backends({"stable": ([stable], 9), "canary": ([candidate], 1)})
        assert canary.apply_nginx("WAIT", proxy.folder, "stable", "canary") == []
        canary.apply_nginx("ROLLBACK", proxy.folder, "stable", "canary")
        assert {name: b.weight for name, b in NginxProxy.open(proxy.folder).backends.items()} == {"stable": 9, "canary": 0}
        assert "127.0.0.1:2001" not in proxy.config_path.read_text()
        proxy.set_backends({"stable": ([stable], 9), "canary": ([candidate], 1)})
        canary.apply_nginx("PROMOTE", proxy.folder, "stable", "canary")
        assert {name: b.weight for name, b in NginxProxy.open(proxy.folder).backends.items()} == {"stable": 0, "canary": 1}
        with pytest.raises(canary.CanaryError, match="not 'stable' and 'green'"):
            canary.apply_nginx("ROLLBACK", proxy.folder, "stable", "green")
