"""How a stream's frame reaches Triton: JPEG re-encoding vs raw pixels over gRPC vs raw pixels in Triton's system
shared memory, at 720p and 1080p, side by side in one run against one running server.

For each frame size and option, ``--frames`` sequential one-frame requests to the detection pipeline (a package photo
resized to the frame, two face crops on it), measuring the round trip (p50/p95), this client's CPU per frame
(``time.process_time``: encoding, serializing, copying, gRPC) and the server's (its process tree, /proc):

- ``jpeg``: the frame encoded as JPEG (simplejpeg, quality 90, 4:2:0), the pipeline's answer: what the stream
  service sends;
- ``raw_grpc``: the frame's 2.7 MB (720p) or 6.2 MB (1080p) of RGB pixels as the request's tensor: measured with
  the pixels sent as the IMAGE input itself, which the preprocess receives whole and refuses at its first check (the
  magic bytes): the round trip and CPU are the transport's, through gRPC into the Python backend;
- ``raw_shm``: the same pixels written into a registered system shared-memory region the request names (Triton reads
  them there: no copy through gRPC), refused the same way.

Then, in this process: decoding H.264 at that size (PyAV, one thread) and converting a frame to RGB, and the
preprocess's own work on each form (the serving library's functions, the pipeline's spec): decoding the JPEG at the
DCT scale the resize needs and resizing, vs resizing the raw pixels. A raw-pixel input would cost its transport plus
that resize; the JPEG path costs the encode, its transport and the decode.

    ./scripts/serve --pipeline face_detector --no-build --grpc-port 18301 ...   # another terminal
    python -m benchmarks.stream_handover --url localhost:18301 --server-pid $(pgrep -o tritonserver)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from multiprocessing import shared_memory
from pathlib import Path

import av
import cv2
import numpy as np
import simplejpeg
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException, serialize_byte_tensor

from benchmarks import cpu, report
from builders import photos
from tests.support import faces
from vision_serving import image_codec, layout, preprocessing
from vision_serving.pipeline_configs import PipelineConfigs

SIZES = {"720p": (1280, 720), "1080p": (1920, 1080)}
OPTIONS = ("jpeg", "raw_grpc", "raw_shm")
RESULTS = Path(__file__).resolve().parent / "results" / "streams"


def frame(width: int, height: int) -> np.ndarray:
    image = cv2.resize(image_codec.decode_rgb(photos.photo_bytes("coffee"), faces.LIMITS), (width, height), interpolation=cv2.INTER_AREA)
    side = height // 3
    for index, name in enumerate(("astronaut", "grace_hopper")):
        x = width // 5 + index * width // 2
        image[height // 4 : height // 4 + side, x : x + side] = faces.face_crop(name, side)
    return np.ascontiguousarray(image)


def payload_input(data: bytes) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput("IMAGE", [1, 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[data]], dtype=np.object_))
    return tensor


def measure(client, model: str, send, frames: int, server_pid: int | None) -> dict:
    send()  # warm-up
    latencies = []
    window = cpu.WindowCPU(server_pid)
    window.start()
    client_start = time.process_time()
    for _ in range(frames):
        started = time.perf_counter()
        send()
        latencies.append(time.perf_counter() - started)
    client_cpu = time.process_time() - client_start
    window.end()
    return {
        "p50_ms": round(float(np.percentile(latencies, 50)) * 1000, 2),
        "p95_ms": round(float(np.percentile(latencies, 95)) * 1000, 2),
        "client_cpu_ms": round(client_cpu / frames * 1000, 2),
        "server_cpu_ms": None if window.server_s is None else round(window.server_s / frames * 1000, 2),
    }


def refused(call) -> None:
    """A request the preprocess must refuse (raw pixels where it takes an encoded image)."""
    try:
        call()
    except InferenceServerException as error:
        if "unrecognized image format" not in str(error):
            raise
        return
    raise AssertionError("the server accepted raw pixels as an image")


def senders(client, model: str, pixels: np.ndarray, region: str) -> dict:
    raw = pixels.tobytes()

    def jpeg() -> None:
        data = simplejpeg.encode_jpeg(pixels, quality=90, colorspace="RGB", colorsubsampling="420")
        client.infer(model, [payload_input(data)])

    def raw_grpc() -> None:
        refused(lambda: client.infer(model, [payload_input(pixels.tobytes())]))

    size = len(serialize_byte_tensor(np.array([[raw]], dtype=np.object_)).item())
    # A POSIX shared-memory object (shm_open's /<region>: what Triton's system shared memory maps); tritonclient's own
    # helper module needs setuptools' pkg_resources, which .venv does not have.
    handle = shared_memory.SharedMemory(name=region, create=True, size=size)
    client.register_system_shared_memory(region, f"/{region}", size)

    def raw_shm() -> None:
        # The BYTES tensor's serialization (a 4-byte length, then the bytes) written straight into the region.
        handle.buf[:4] = len(raw).to_bytes(4, "little")
        handle.buf[4 : 4 + pixels.nbytes] = pixels.reshape(-1).data
        tensor = grpcclient.InferInput("IMAGE", [1, 1], "BYTES")
        tensor.set_shared_memory(region, size)
        refused(lambda: client.infer(model, [tensor]))

    return {"jpeg": jpeg, "raw_grpc": raw_grpc, "raw_shm": raw_shm, "_handle": handle}


def preprocess_costs(pipeline: str, pixels: np.ndarray) -> dict:
    """CPU ms per frame of the preprocess's work on a JPEG (decode at the needed scale + resize) and on raw pixels."""
    configs = PipelineConfigs.load(layout.pipeline(pipeline))
    spec = preprocessing.PreprocessSpec.from_config(configs.preprocess)
    outputs = preprocessing.PreprocessOutputs.from_config(configs.preprocess)
    limits = preprocessing.limits_from_config(configs.preprocess)
    minimum = preprocessing.decode_minimum(spec)
    preprocessing.set_threads(1)
    data = simplejpeg.encode_jpeg(pixels, quality=90, colorspace="RGB", colorsubsampling="420")
    height, width = pixels.shape[:2]

    def from_jpeg() -> None:
        preprocessing.preprocess_outputs([image_codec.decode(data, limits, minimum)], spec, outputs)

    def from_raw() -> None:
        preprocessing.preprocess_outputs([image_codec.Decoded(pixels, height, width)], spec, outputs)

    def encode() -> None:
        simplejpeg.encode_jpeg(pixels, quality=90, colorspace="RGB", colorsubsampling="420")

    return {
        "jpeg_bytes": len(data),
        "encode_ms": round(cpu.cpu_ms(encode, 1, 20), 2),
        "jpeg_preprocess_ms": round(cpu.cpu_ms(from_jpeg, 1, 20), 2),
        "raw_preprocess_ms": round(cpu.cpu_ms(from_raw, 1, 20), 2),
    }


def write_camera_clip(path: Path, width: int, height: int, fps: int = 30, seconds: float = 3.0) -> Path:
    """A clip more like a camera's than the tests' flat scenes: the photo frame (:func:`frame`) with sensor-like noise
    (sigma 3) on every frame and a face crossing it; libx264 at its default quality (crf 23), a key frame a second."""
    base = frame(width, height).astype(np.int16)
    crop = faces.face_crop("camera", height // 3)
    rng = np.random.default_rng(0)
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {"g": str(fps), "preset": "veryfast"}
        for index in range(round(fps * seconds)):
            image = np.clip(base + rng.normal(0, 3, base.shape), 0, 255).astype(np.uint8)
            x = int(index / (fps * seconds) * (width - crop.shape[1]))
            image[height // 2 : height // 2 + crop.shape[0], x : x + crop.shape[1]] = crop
            for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def decode_costs(width: int, height: int, folder: Path) -> dict:
    """CPU ms per frame of decoding H.264 (PyAV, one thread, a 30 fps camera-like clip: :func:`write_camera_clip`) and
    of converting a frame to RGB pixels (done only for the frames a stream keeps); the clip's bitrate."""
    clip = write_camera_clip(folder / f"decode_{height}.mp4", width, height)
    decode_s = rgb_s = 0.0
    frames = 0
    for _ in range(3):
        with av.open(str(clip)) as container:
            stream = container.streams.video[0]
            stream.codec_context.thread_count = 1
            for packet in container.demux(stream):
                started = time.thread_time()
                decoded = packet.decode()
                decode_s += time.thread_time() - started
                for item in decoded:
                    started = time.thread_time()
                    item.to_ndarray(format="rgb24")
                    rgb_s += time.thread_time() - started
                    frames += 1
    megabits = clip.stat().st_size * 8 / 3.0 / 1e6
    return {"decode_ms": round(decode_s / frames * 1000, 2), "rgb_ms": round(rgb_s / frames * 1000, 2), "mbit_s": round(megabits, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="localhost:8001")
    parser.add_argument("--model", default="face_detector")
    parser.add_argument("--server-pid", type=int, help="tritonserver's pid: its process tree's CPU per frame")
    parser.add_argument("--frames", type=int, default=60)
    parser.add_argument("--output", type=Path, default=RESULTS)
    arguments = parser.parse_args(argv)
    command = "python -m benchmarks.stream_handover " + " ".join(sys.argv[1:] if argv is None else argv)
    result = report.new("stream_handover", "How a frame reaches Triton: JPEG vs raw pixels (gRPC, system shared memory)", command)
    report.table(
        result,
        "transport",
        "One-frame requests, sequential: round trip and CPU per frame",
        {"size": "frame", "option": "hand-over", "bytes": "bytes sent", "p50_ms": "p50 ms", "p95_ms": "p95 ms",
         "client_cpu_ms": "client CPU ms", "server_cpu_ms": "server CPU ms"},
        "jpeg: the full answer; raw_grpc/raw_shm: the transport alone (the preprocess refuses the pixels at its first check).",
    )  # fmt: skip
    report.table(
        result,
        "preprocess",
        "The preprocess's work per frame, in this process (the pipeline's spec)",
        {"size": "frame", "mbit_s": "H.264 Mbit/s (30 fps)", "decode_ms": "H.264 decode ms", "rgb_ms": "to RGB ms",
         "jpeg_bytes": "JPEG bytes", "encode_ms": "JPEG encode ms", "jpeg_preprocess_ms": "JPEG decode + resize ms",
         "raw_preprocess_ms": "raw resize ms"},
    )  # fmt: skip
    client = grpcclient.InferenceServerClient(arguments.url)
    for size, (width, height) in SIZES.items():
        pixels = frame(width, height)
        send = senders(client, arguments.model, pixels, f"handover_{size}")
        try:
            for option in OPTIONS:
                measured = measure(client, arguments.model, send[option], arguments.frames, arguments.server_pid)
                sent = (
                    len(simplejpeg.encode_jpeg(pixels, quality=90, colorspace="RGB", colorsubsampling="420"))
                    if option == "jpeg"
                    else pixels.nbytes
                )
                report.add(result, "transport", size=size, option=option, bytes=sent, **measured)
                print(size, option, measured, flush=True)
        finally:
            client.unregister_system_shared_memory(f"handover_{size}")
            send["_handle"].close()
            send["_handle"].unlink()
        with tempfile.TemporaryDirectory() as folder:
            costs = decode_costs(width, height, Path(folder)) | preprocess_costs(arguments.model, pixels)
        report.add(result, "preprocess", size=size, **costs)
        print(size, costs, flush=True)
    report.write(report.finish(result), arguments.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
