"""Roll a new version of a classification pipeline's core into a running Triton, with no failed requests.

    python -m scripts.rollout --url localhost:8001 --ensemble image_classifier --version 2
                              [--model image_classifier_core] [--golden-dir DIR]
                              [--admin-key KEY=VALUE] [--min-agreement 1.0] [--json]

The check is a classification pipeline's: each golden image's top-1 ``LABELS``
answer through the ensemble (``--model`` defaults to ``<ensemble>_core``).

The server must run with explicit model control (``--model-control-mode=explicit
--load-model=*``) and the new version's folder must be in its model
repository. The switch relies on how the ensemble resolves ``model_version:
-1``: it uses the highest version of the composing model that is loaded, and
Triton reloads the ensemble whenever a composing model is (re)loaded, keeping
the previous one serving until the new one is ready. So:

1. baseline  - classify the golden images through the ensemble (old version);
2. load      - ``load_model`` with a config override whose ``version_policy``
               is ``specific: [old, new]``. A version that fails to load
               (its initialize() raises) never serves; Triton keeps the old one;
3. verify    - the ensemble now routes to the new (highest) version: the
               golden images must succeed, agree with golden.json (or with
               the baseline answers) and be counted in the new version's
               statistics;
4. switch    - ``specific: [new]``; wait until the old version has unloaded;
5. confirm   - the golden check again.

Any failure after step 2 rolls back with ``specific: [old]``. Between steps 2
and the end of a rollback (about 5 s here: the check, then a reload) a bad
version answers live traffic: wrong answers, or errors if it fails at run
time. Catch run-time failures at load time instead, in the model's own
initialize() (run one batch, check the output shape against the config):
Triton's ``model_warmup`` would do it, but a warm-up that fails during a load
under traffic crashed tritonserver 2.51 (SIGSEGV, 4 of 6 trials here), so the
tool does not add one.

Loading the ensemble itself is never done: in Triton 2.51 an explicit
ensemble load reloads its composing models from the repository (dropping the
override) and a failed one unloads the ensemble.

If the new version number is lower than the serving one, the ensemble keeps
using the old version while both are loaded; the tool then verifies right
after the switch and rolls back from there (traffic sees the new version
during that check).

The override lives in the server only: a restart applies the repository's
config again (default version policy: the highest version folder). Make the
repository agree (remove the old version folder or set ``version_policy``)
before the next restart.

A version that fails to load leaves a failure record in Triton 2.51: with
``--strict-readiness`` the server's ``/v2/health/ready`` stays false until a
restart (the ensemble's ``/v2/models/<ensemble>/ready`` stays true); the tool
warns when that happens.

Exit codes: 0 rolled out; 1 rejected and rolled back (the old version serves);
2 nothing changed (bad arguments, server or model not ready); 3 rollback
failed, manual action needed.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

REPOSITORY_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_GOLDEN_DIR = REPOSITORY_ROOT / ".build" / "samples"
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
GOLDEN_FILE = "golden.json"

EXIT_OK, EXIT_ROLLED_BACK, EXIT_UNCHANGED, EXIT_MANUAL = 0, 1, 2, 3


class RolloutError(RuntimeError):
    """A step failed; the message says which and why."""


@dataclass
class Golden:
    """Golden images and, optionally, the top-1 labels each may get (golden.json: {"file": ["label", ...]})."""

    images: dict[str, bytes]
    expected: dict[str, set[str]] = field(default_factory=dict)

    @classmethod
    def load(cls, directory: Path) -> Golden:
        if not directory.is_dir():
            raise RolloutError(f"golden directory {directory} does not exist")
        images = {
            path.name: path.read_bytes() for path in sorted(directory.iterdir()) if path.suffix.lower() in IMAGE_SUFFIXES and path.is_file()
        }
        if not images:
            raise RolloutError(f"no golden images ({', '.join(IMAGE_SUFFIXES)}) in {directory}")
        expected: dict[str, set[str]] = {}
        if (directory / GOLDEN_FILE).is_file():
            raw = json.loads((directory / GOLDEN_FILE).read_text())
            expected = {name: {labels} if isinstance(labels, str) else set(labels) for name, labels in raw.items()}
            unknown = set(expected) - set(images)
            if unknown:
                raise RolloutError(f"{GOLDEN_FILE} names images that are not in {directory}: {sorted(unknown)}")
        return cls(images, expected)


class _WithHeaders:
    """A tritonclient that sends ``headers`` with every call (restricted APIs need their key)."""

    def __init__(self, client, headers: dict[str, str]) -> None:
        self._client, self._headers = client, headers

    def __getattr__(self, name: str):
        attribute = getattr(self._client, name)
        if not self._headers or not callable(attribute) or name == "close":
            return attribute
        return functools.partial(attribute, headers=self._headers)


class Rollout:
    def __init__(
        self,
        url: str,
        model: str,
        version: int,
        golden: Golden,
        ensemble: str = "image_classifier",
        min_agreement: float = 1.0,
        timeout_s: float = 300.0,
        log=None,
        headers: dict[str, str] | None = None,
    ) -> None:
        import tritonclient.grpc as grpcclient

        self.grpc = grpcclient
        self.client = _WithHeaders(grpcclient.InferenceServerClient(url), headers or {})
        self.model = model
        self.version = version
        self.golden = golden
        self.ensemble = ensemble
        self.min_agreement = min_agreement
        self.timeout_s = timeout_s
        self.log = log or (lambda message: print(f"rollout: {message}", file=sys.stderr, flush=True))
        self.steps: list[dict] = []
        self._t0 = time.monotonic()

    # ------------------------------------------------------------------ helpers

    def _step(self, name: str, **details) -> None:
        record = {"t_s": round(time.monotonic() - self._t0, 2), "step": name, **details}
        self.steps.append(record)
        self.log(f"[{record['t_s']:7.2f}s] {name}" + "".join(f" {key}={value}" for key, value in details.items()))

    def ready_versions(self) -> list[int]:
        index = self.client.get_model_repository_index(as_json=True).get("models", [])
        return sorted(
            int(entry["version"])
            for entry in index
            if entry.get("name") == self.model and entry.get("state") == "READY" and entry.get("version")
        )

    def _version_count(self, version: int) -> int:
        stats = self.client.get_inference_statistics(self.model, str(version), as_json=True)
        for entry in stats.get("model_stats", []):
            if entry.get("version") == str(version):
                return int(entry.get("inference_count", 0))
        return 0

    def _ensemble_io(self) -> tuple[str, str, str | None]:
        metadata = self.client.get_model_metadata(self.ensemble, as_json=True)
        images = [tensor["name"] for tensor in metadata["inputs"] if tensor["datatype"] == "BYTES"]
        outputs = {tensor["name"] for tensor in metadata["outputs"]}
        if len(images) != 1 or "LABELS" not in outputs:
            raise RolloutError(
                f"ensemble {self.ensemble!r} does not take one BYTES input and give LABELS "
                "(the golden check compares a classification pipeline's top-1 labels)"
            )
        return images[0], "LABELS", "CLASS_IDS" if "CLASS_IDS" in outputs else None

    def classify_golden(self) -> dict[str, tuple[str, int | None] | str]:
        """Golden image -> (top-1 label, class id), or an error string."""
        input_name, labels_name, ids_name = self._ensemble_io()
        answers: dict[str, tuple[str, int | None] | str] = {}
        for name, payload in self.golden.images.items():
            tensor = self.grpc.InferInput(input_name, [1, 1], "BYTES")
            tensor.set_data_from_numpy(np.array([[payload]], dtype=np.object_))
            try:
                result = self.client.infer(self.ensemble, [tensor], client_timeout=60)
                label = result.as_numpy(labels_name)[0, 0].decode()
                scores = result.as_numpy("SCORES") if "SCORES" in {o.name for o in result.get_response().outputs} else None
                if scores is not None and not all(math.isfinite(float(s)) for s in scores.reshape(-1)):
                    answers[name] = "non-finite scores"
                    continue
                answers[name] = (label, int(result.as_numpy(ids_name)[0, 0]) if ids_name else None)
            except Exception as error:  # any failure of a golden request fails the check
                answers[name] = f"request failed: {error}"
        return answers

    def check(self, baseline: dict, version: int) -> None:
        """Golden images through the ensemble must succeed, agree, and be served by ``version``."""
        before = self._version_count(version)
        answers = self.classify_golden()
        served = self._version_count(version) - before
        failures, disagreements, agree = [], [], 0
        for name, answer in answers.items():
            if isinstance(answer, str):
                failures.append(f"{name}: {answer}")
                continue
            label = answer[0]
            if name in self.golden.expected:
                accepted = self.golden.expected[name]
            elif isinstance(baseline.get(name), tuple):
                accepted = {baseline[name][0]}
            else:
                accepted = None  # no reference: success is all we can check
            if accepted is None or label in accepted:
                agree += 1
            else:
                disagreements.append(f"{name}: top-1 {label!r}, expected one of {sorted(accepted)}")
        if served < len(answers):
            failures.append(f"only {served} of {len(answers)} golden requests reached {self.model} version {version}")
        agreement = agree / len(answers)
        self._step("golden check", version=version, agreement=f"{agreement:.2f}", served_by_version=served)
        if failures or agreement < self.min_agreement:
            raise RolloutError(f"golden check of version {version} failed: " + "; ".join(failures + disagreements))

    def load(self, versions: list[int]) -> None:
        config = self.base_config()
        config["version_policy"] = {"specific": {"versions": versions}}
        started = time.monotonic()
        self.client.load_model(self.model, config=json.dumps(config), client_timeout=self.timeout_s)
        self._step("loaded", versions=versions, seconds=round(time.monotonic() - started, 1))
        ready = self.ready_versions()
        if sorted(ready) != sorted(versions):
            raise RolloutError(f"after loading {versions}, the ready versions are {ready}")

    def _wait_unloaded(self, version: int, timeout_s: float = 120.0) -> None:
        """load_model returns while the replaced version still finishes its in-flight requests
        (state UNLOADING, which also makes a strict /v2/health/ready false); wait it out."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            states = [
                entry.get("state")
                for entry in self.client.get_model_repository_index(as_json=True).get("models", [])
                if entry.get("name") == self.model and entry.get("version") == str(version)
            ]
            if not any(state in ("UNLOADING", "READY") for state in states):
                self._step("old version unloaded", version=version)
                return
            time.sleep(0.2)
        self._step("warning", detail=f"version {version} still unloading after {timeout_s:.0f} s")

    def _warn_if_server_unready(self) -> None:
        """A version that failed to load keeps its failure record in Triton 2.51: with
        --strict-readiness the server reports not ready (until a restart) although the
        old version serves. Say so, since a readiness probe on /v2/health/ready would
        take the replica out of service."""
        try:
            if self.client.is_server_ready() or not self.client.is_model_ready(self.ensemble):
                return
            failed = [
                f"{entry.get('name')}:{entry.get('version')}"
                for entry in self.client.get_model_repository_index(as_json=True).get("models", [])
                if entry.get("state") == "UNAVAILABLE" and entry.get("reason", "unloaded") != "unloaded"
            ]
            self._step(
                "warning",
                detail=f"/v2/health/ready is false: Triton remembers failed loads {failed} until a restart; "
                f"{self.ensemble} is ready and serving (probe /v2/models/{self.ensemble}/ready, or restart)",
            )
        except Exception:
            pass

    def base_config(self) -> dict:
        if not hasattr(self, "_base_config"):
            config = self.client.get_model_config(self.model, as_json=True)["config"]
            config.pop("version_policy", None)
            self._base_config = config
        return json.loads(json.dumps(self._base_config))

    # ------------------------------------------------------------------ the procedure

    def run(self) -> int:
        try:
            if not self.client.is_server_live():
                raise RolloutError("the server is not live")
            ready = self.ready_versions()
            if not ready:
                raise RolloutError(f"model {self.model!r} has no ready version")
            if ready == [self.version]:
                self._step("nothing to do", serving=ready)
                return EXIT_OK
            old_versions = [v for v in ready if v != self.version]
            old = max(old_versions)
            if not self.client.is_model_ready(self.ensemble):
                raise RolloutError(f"ensemble {self.ensemble!r} is not ready")
            baseline = self.classify_golden()
            failed = {name: answer for name, answer in baseline.items() if isinstance(answer, str)}
            if failed:
                raise RolloutError(f"golden images fail on the serving version {old}: {failed}")
            self._step("baseline", serving=ready, images=len(baseline))
        except RolloutError as error:
            self._step("unchanged", error=str(error))
            return EXIT_UNCHANGED
        except Exception as error:
            self._step("unchanged", error=f"{type(error).__name__}: {error}")
            return EXIT_UNCHANGED

        both = sorted({old, self.version})
        new_is_highest = self.version > old
        try:
            try:
                self.load(both)
            except Exception as error:
                if _refused(error):
                    self._step("unchanged", error=f"the server refuses model control: {_short(error)}", hint=REFUSED_HINT)
                    return EXIT_UNCHANGED
                # Triton keeps the previously loaded versions when a load fails.
                self._step("load failed", error=_short(error))
                raise RolloutError(f"loading version {self.version} failed") from None
            if new_is_highest:
                self.check(baseline, self.version)
            self.load([self.version])
            self.check(baseline, self.version)
            self._wait_unloaded(old)
        except Exception as error:
            reason = str(error) if isinstance(error, RolloutError) else f"{type(error).__name__}: {_short(error)}"
            self._step("rolling back", reason=reason, to=old)
            try:
                if self.ready_versions() != [old]:
                    self.load([old])
                self.check(baseline, old)
            except Exception as rollback_error:
                self._step("ROLLBACK FAILED", error=_short(rollback_error), action="manual: load the old version")
                return EXIT_MANUAL
            self._step("rolled back", serving=[old])
            self._warn_if_server_unready()
            return EXIT_ROLLED_BACK
        self._step(
            "rolled out",
            serving=[self.version],
            note="server-side override; make the repository's version folders/policy agree before a restart",
        )
        return EXIT_OK


REFUSED_HINT = (
    "start tritonserver with --model-control-mode=explicit --load-model=*, and pass --admin-key KEY=VALUE "
    "if it restricts the model-repository API (--grpc-restricted-protocol=model-repository:KEY=VALUE)"
)


def _refused(error: Exception) -> bool:
    """Model control is off (mode none/poll) or the API is restricted and our header is missing or wrong."""
    text = str(error)
    return "not allowed" in text or "restricted" in text.lower()


def _short(error: Exception) -> str:
    text = str(error).strip().splitlines()
    return text[0][:300] if text else type(error).__name__


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rollout", description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="localhost:8001", help="Triton gRPC address (default localhost:8001)")
    parser.add_argument("--model", help="the composing model to roll (default: <--ensemble>_core, the pipeline's core)")
    parser.add_argument("--version", type=int, required=True, help="the version folder to roll out")
    parser.add_argument(
        "--ensemble",
        default="image_classifier",
        help="the classification pipeline (ensemble) clients call; the golden check compares its top-1 LABELS (default image_classifier)",
    )
    parser.add_argument(
        "--golden-dir",
        type=Path,
        default=DEFAULT_GOLDEN_DIR,
        help=f"images to check with (and optional {GOLDEN_FILE}: file -> accepted top-1 labels); "
        "without it the new version must agree with the old one (default .build/samples)",
    )
    parser.add_argument("--min-agreement", type=float, default=1.0, help="fraction of golden images that must agree (default 1.0)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds allowed for each load (default 300)")
    parser.add_argument(
        "--admin-key",
        metavar="KEY=VALUE",
        help="the key of a server started with --grpc-restricted-protocol=model-repository,...:KEY=VALUE "
        "(sent as the gRPC header triton-grpc-protocol-KEY)",
    )
    parser.add_argument("--header", action="append", default=[], metavar="KEY=VALUE", help="a raw gRPC header for every call")
    parser.add_argument("--json", action="store_true", help="print the step log as JSON on stdout")
    args = parser.parse_args(argv)
    if args.version < 1:
        parser.error("--version must be a positive version number")
    headers = {}
    for option, item in [("--header", item) for item in args.header] + [("--admin-key", args.admin_key)] * bool(args.admin_key):
        key, sep, value = item.partition("=")
        if not sep or not key:
            parser.error(f"{option} {item!r}: expected KEY=VALUE")
        headers[key.lower() if option == "--header" else f"triton-grpc-protocol-{key.lower()}"] = value
    try:
        golden = Golden.load(args.golden_dir)
    except (RolloutError, ValueError) as error:
        print(f"rollout: error: {error}", file=sys.stderr)
        return EXIT_UNCHANGED
    model = args.model or f"{args.ensemble}_core"
    rollout = Rollout(args.url, model, args.version, golden, args.ensemble, args.min_agreement, args.timeout, headers=headers)
    code = rollout.run()
    if args.json:
        print(json.dumps({"exit_code": code, "steps": rollout.steps}, indent=2))
    return code


if __name__ == "__main__":
    sys.exit(main())
