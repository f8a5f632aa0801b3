"""JSON lines and webhooks (vision_streams.outputs) against a real HTTP server in the test (aiohttp)."""

from __future__ import annotations

import asyncio
import json

from aiohttp import web

from vision_streams.outputs import Sink, Webhook


async def hook_server(failures: int, status: int = 503):
    """A webhook receiver that answers ``status`` to its first ``failures`` POSTs, then 204; returns what it got."""
    received: list[list[dict]] = []
    calls = {"n": 0}

    async def handle(request: web.Request) -> web.Response:
        calls["n"] += 1
        if calls["n"] <= failures:
            return web.Response(status=status)
        received.append(await request.json())
        return web.Response(status=204)

    app = web.Application()
    app.add_routes([web.post("/hook", handle)])
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}/hook", received, calls


async def deliver(failures: int, status: int, retries: int, records: int = 3):
    runner, url, received, calls = await hook_server(failures, status)
    hook = Webhook(url, retries=retries)
    sink = Sink("", tracks=True, webhooks=[hook])
    await sink.start()
    for index in range(records):
        sink.event({"stream": "s", "event": "line_crossing", "n": index})
    sink.frame({"stream": "s", "tracks": []})  # frames go to the JSON lines only, unless webhook_tracks
    for _ in range(100):
        if hook.stats.sent + hook.stats.dropped >= records:
            break
        await asyncio.sleep(0.05)
    await sink.close()
    await runner.cleanup()
    return received, calls["n"], hook.stats


def test_a_webhook_is_retried_until_it_takes_the_events():
    received, calls, stats = asyncio.run(deliver(failures=2, status=503, retries=5))
    assert calls == 3 and stats.retried == 2 and stats.sent == 3 and stats.dropped == 0
    assert [r["n"] for batch in received for r in batch] == [0, 1, 2]
    assert all(r["type"] == "event" for batch in received for r in batch)


def test_a_webhook_out_of_retries_or_refusing_drops_and_counts():
    _, calls, stats = asyncio.run(deliver(failures=10, status=500, retries=1))
    assert calls == 2 and stats.dropped == 3 and stats.last_error == "HTTP 500"
    _, calls, stats = asyncio.run(deliver(failures=10, status=400, retries=5))
    assert calls == 1 and stats.dropped == 3  # a 4xx is the receiver's refusal: not retried


def test_json_lines_have_one_record_per_line(tmp_path):
    async def write():
        sink = Sink(str(tmp_path / "out.jsonl"), tracks=True, webhooks=[])
        sink.frame({"stream": "s", "tracks": [{"id": 1}]})
        sink.event({"stream": "s", "event": "zone_enter"})
        await sink.close()

    asyncio.run(write())
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert lines == [{"type": "frame", "stream": "s", "tracks": [{"id": 1}]}, {"type": "event", "stream": "s", "event": "zone_enter"}]


def test_a_full_webhook_queue_drops_and_counts():
    async def fill():
        hook = Webhook("http://127.0.0.1:9/none", capacity=2)
        for index in range(5):
            hook.offer({"n": index})
        return hook.stats.dropped, hook.queue.qsize()

    assert asyncio.run(fill()) == (3, 2)
