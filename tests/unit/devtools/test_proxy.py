"""devtools.proxy: the nginx config it renders, and real nginx started, reloaded and drained (no upstream needed)."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from devtools.proxy import Backend, NginxProxy, ProxyError, Upstream, render_config, server_weights

A = Upstream(http="127.0.0.1:1000", grpc="127.0.0.1:1001")
B = Upstream(http="127.0.0.1:2000", grpc="127.0.0.1:2001")
C = Upstream(http="127.0.0.1:3000", grpc="127.0.0.1:3001")


def test_backend_weights_hold_whatever_the_number_of_servers():
    weights = server_weights({"stable": Backend((A, B), 9), "canary": Backend((C,), 1)})
    assert [(name, server.grpc, weight) for name, server, weight in weights] == [
        ("canary", C.grpc, 2),
        ("stable", A.grpc, 9),
        ("stable", B.grpc, 9),
    ]
    assert [weight for *_, weight in server_weights({"a": Backend((A,), 50), "b": Backend((B,), 50)})] == [1, 1]
    assert server_weights({"a": Backend((A,), 0), "b": Backend((B,), 3)}) == [("b", B, 1)]


def test_rendered_config_has_both_listeners_weighted_upstreams_and_private_paths(tmp_path):
    text = render_config(tmp_path, 8080, 8081, {"stable": Backend((A,), 9), "canary": Backend((B,), 1)})
    assert "listen 127.0.0.1:8080;" in text and "listen 127.0.0.1:8081 http2;" in text
    assert "grpc_pass grpc://triton_grpc;" in text and "proxy_pass http://triton_http;" in text
    assert "server 127.0.0.1:1001 weight=9 max_fails=1 fail_timeout=5s;  # stable" in text
    assert "server 127.0.0.1:2000 weight=1 max_fails=1 fail_timeout=5s;  # canary" in text
    assert text.count("keepalive 32;") == 2 and 'proxy_set_header Connection "";' in text
    assert f"pid {tmp_path.resolve()}/nginx.pid;" in text
    assert "/var/" not in text and "/etc/" not in text and "user " not in text
    assert "user alice;" in render_config(tmp_path, 1, 2, {}, user="alice")
    assert "server 127.0.0.1:9 down;" in render_config(tmp_path, 1, 2, {"a": Backend((A,), 0)})


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
