"""devtools.client's retries (RetryPolicy, TritonConnection.request) against a fake client: no server."""

from __future__ import annotations

import random

import pytest
from tritonclient.utils import InferenceServerException

from devtools.client import RetryPolicy, TritonConnection, is_retryable


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class FakeClient:
    """Answers ``is_server_ready`` with the queued outcomes in turn (an exception is raised), then True."""

    def __init__(self, outcomes: list[BaseException | bool], clock: FakeClock | None = None, call_s: float = 0.0) -> None:
        self.outcomes = list(outcomes)
        self.calls = 0
        self.clock, self.call_s = clock, call_s

    def is_server_ready(self, **_: object) -> bool:
        self.calls += 1
        if self.clock:
            self.clock.now += self.call_s
        outcome = self.outcomes.pop(0) if self.outcomes else True
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


def unavailable(status: str = "StatusCode.UNAVAILABLE") -> InferenceServerException:
    return InferenceServerException("Exceeds maximum queue size", status=status)


def connection(client: FakeClient, clock: FakeClock, deadline_s: float = 10.0, protocol: str = "grpc") -> TritonConnection:
    policy = RetryPolicy(deadline_s=deadline_s, clock=clock, sleep=clock.sleep, rng=random.Random(0))
    return TritonConnection(protocol, "fake:0", timeout=5.0, retry=policy, client=client)


def test_only_unavailable_and_refused_connections_are_retryable():
    assert is_retryable(unavailable()) and is_retryable(unavailable("503"))  # gRPC, HTTP
    assert is_retryable(ConnectionRefusedError())
    for status in (
        "StatusCode.INVALID_ARGUMENT",
        "400",
        "StatusCode.INTERNAL",
        "500",
        "StatusCode.DEADLINE_EXCEEDED",
        "StatusCode.NOT_FOUND",
    ):
        assert not is_retryable(InferenceServerException("no", status=status)), status
    assert not is_retryable(TimeoutError()) and not is_retryable(ValueError())


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_unavailable_is_retried_until_it_succeeds(protocol):
    clock = FakeClock()
    status = "StatusCode.UNAVAILABLE" if protocol == "grpc" else "503"
    client = FakeClient([unavailable(status), unavailable(status), ConnectionRefusedError()], clock)
    conn = connection(client, clock, protocol=protocol)
    assert conn.request("is_server_ready") is True
    assert client.calls == 4 and conn.retry.retries == 3 and len(clock.sleeps) == 3


def test_backoff_is_jittered_exponential_and_capped():
    policy = RetryPolicy(base_s=0.1, cap_s=2.0, rng=random.Random(1))
    for attempt in range(10):
        bound = min(2.0, 0.1 * 2**attempt)
        samples = [policy.backoff_s(attempt) for _ in range(200)]
        assert all(0.0 <= s <= bound for s in samples)
        assert max(samples) > 0.8 * bound and min(samples) < 0.2 * bound  # spread over the whole range: jitter
    # Two clients with different seeds do not retry in lockstep.
    assert RetryPolicy(rng=random.Random(1)).backoff_s(3) != RetryPolicy(rng=random.Random(2)).backoff_s(3)


def test_gives_up_with_the_last_error_at_the_deadline():
    clock = FakeClock()
    client = FakeClient([unavailable()] * 1000, clock, call_s=0.01)
    conn = connection(client, clock, deadline_s=5.0)
    with pytest.raises(InferenceServerException) as raised:
        conn.request("is_server_ready")
    assert str(raised.value.status()) == "StatusCode.UNAVAILABLE"
    assert 5.0 - 0.01 <= clock.now <= 5.0 + 0.01 + 1e-9, "tried until the deadline, and no attempt starts after it"
    assert clock.now > 5.0 - 2.0 - 0.01, "it kept trying until the next pause would pass the deadline"
    assert 3 < client.calls < 1000


@pytest.mark.parametrize(
    "error",
    [
        InferenceServerException("bad image", status="StatusCode.INVALID_ARGUMENT"),
        InferenceServerException("stub", status="500"),
        TimeoutError(),
    ],
)
def test_other_errors_are_not_retried(error):
    clock = FakeClock()
    client = FakeClient([error], clock)
    with pytest.raises(type(error)):
        connection(client, clock).request("is_server_ready")
    assert client.calls == 1 and clock.sleeps == []


def test_deadline_zero_means_no_retries():
    clock = FakeClock()
    client = FakeClient([unavailable()], clock)
    with pytest.raises(InferenceServerException):
        connection(client, clock, deadline_s=0.0).request("is_server_ready")
    assert client.calls == 1


def test_every_tasks_client_takes_a_deadline_and_its_own_options():
    from devtools import client
    from vision_serving.tasks import registry

    classify = registry.task("classification")
    assert client.parse_args("classify", classify, "image_classifier", ["x.jpg", "--deadline", "2.5"]).deadline == 2.5
    assert client.parse_args("classify", classify, "image_classifier", ["x.jpg", "--top-k", "3"]).deadline == client.DEFAULT_DEADLINE_S
    detect = client.parse_args(
        "detect", registry.task("detection"), "face_detector", ["x.jpg", "--deadline", "0", "--iou-threshold", "0.5"]
    )
    assert detect.deadline == 0.0 and detect.iou_threshold == 0.5 and detect.model == "face_detector"
    segment = client.parse_args("segment", registry.task("segmentation"), "person_segmenter", ["x.jpg", "--deadline", "1", "--overlay"])
    assert segment.deadline == 1.0 and segment.overlay
