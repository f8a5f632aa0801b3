"""devtools.proxy: the nginx config it renders and the weights it sets (real nginx: tests/deploy/test_nginx_proxy.py)."""

from __future__ import annotations

from devtools.proxy import Backend, Upstream, render_config, server_weights

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
