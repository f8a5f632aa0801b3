"""A request's photo and options, however they arrive, read under the pipeline's size limit.

- the raw body, with an ``image/*`` or ``application/octet-stream`` Content-Type;
- ``multipart/form-data`` with the photo as the file field ``image`` (or a ``url`` field), options as fields;
- ``application/json``: ``{"image": "<base64>"}`` or ``{"url": "https://..."}``, options as fields;
- options as query parameters in every form.

The limit is checked before the body is read in full: a declared Content-Length over it is refused at once, and the
body is counted as it streams in (chunked uploads), so 413 comes without the gateway holding more than the limit.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass, field
from typing import Any

from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.requests import Request

from .errors import bad_request, too_large, unsupported

# What a multipart or JSON body may hold beyond the photo itself (fields, boundaries, headers).
ENVELOPE_BYTES = 64 * 1024
RAW_TYPES = ("image/", "application/octet-stream")
IMAGE_FIELD = "image"
URL_FIELD = "url"


@dataclass
class Upload:
    photo: bytes | None = None
    url: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)  # options and choices: typed from JSON, text from forms and queries


async def capped(request: Request, limit: int) -> AsyncGenerator[bytes, None]:
    """The body's chunks, refused (413) as soon as it is longer than ``limit``, declared or not."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large(limit)
    total = 0
    async for chunk in request.stream():
        total += len(chunk)
        if total > limit:
            raise too_large(limit)
        yield chunk


async def body(request: Request, limit: int) -> bytes:
    return b"".join([chunk async for chunk in capped(request, limit)])


class _Parser(MultiPartParser):
    spool_max_size = 1 << 30  # the body is capped already: keep the photo in memory


def media_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";", 1)[0].strip().lower()


async def read_upload(request: Request, max_image_bytes: int) -> Upload:
    """The photo (or its URL) and the fields of ``request``; 413 over ``max_image_bytes``, 415 for another media type."""
    kind = media_type(request)
    if kind.startswith(RAW_TYPES):
        upload = Upload(photo=await body(request, max_image_bytes))
    elif kind == "multipart/form-data":
        upload = await _multipart(request, max_image_bytes)
    elif kind == "application/json":
        upload = _json(await body(request, math.ceil(max_image_bytes / 3) * 4 + ENVELOPE_BYTES), max_image_bytes)
    else:
        raise unsupported(
            f"Content-Type {kind or '(none)'!r} is not taken: send the photo as image/* or application/octet-stream, "
            'as multipart/form-data (file field \'image\'), or as application/json ({"image": base64} or {"url": ...})'
        )
    for name, value in request.query_params.multi_items():
        if name in upload.fields:
            raise bad_request(f"option {name!r} is given twice (in the query and the body)")
        upload.fields[name] = value
    return upload


async def _multipart(request: Request, max_image_bytes: int) -> Upload:
    parser = _Parser(
        request.headers, capped(request, max_image_bytes + ENVELOPE_BYTES), max_files=1, max_fields=32, max_part_size=ENVELOPE_BYTES
    )
    try:
        form = await parser.parse()
    except MultiPartException as error:
        raise bad_request(f"the multipart body cannot be read: {error.message}") from None
    upload = Upload()
    for name, value in form.multi_items():
        if isinstance(value, UploadFile):
            if name != IMAGE_FIELD:
                raise bad_request(f"the file field is {name!r}: send the photo as the file field {IMAGE_FIELD!r}")
            upload.photo = await value.read()
            await value.close()
        elif name == URL_FIELD:
            upload.url = value
        elif name in upload.fields:
            raise bad_request(f"field {name!r} is given twice")
        else:
            upload.fields[name] = value
    return upload


def _json(data: bytes, max_image_bytes: int) -> Upload:
    try:
        document = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise bad_request(f"the JSON body cannot be read: {error}") from None
    if not isinstance(document, Mapping):
        raise bad_request('the JSON body must be an object: {"image": base64} or {"url": ...}, with options as fields')
    fields = dict(document)
    upload = Upload()
    image, url = fields.pop(IMAGE_FIELD, None), fields.pop(URL_FIELD, None)
    if image is not None:
        if not isinstance(image, str):
            raise bad_request("'image' must be the photo's bytes in base64 (a string)")
        try:
            upload.photo = base64.b64decode(image.split(",", 1)[1] if image.startswith("data:") else image, validate=True)
        except (binascii.Error, ValueError):
            raise bad_request("'image' is not valid base64") from None
        if len(upload.photo) > max_image_bytes:
            raise too_large(max_image_bytes)
    if url is not None:
        if not isinstance(url, str):
            raise bad_request("'url' must be a string")
        upload.url = url
    upload.fields = fields
    return upload


def option_value(name: str, value: Any, schema: Mapping[str, Any]) -> Any:
    """``value`` (typed from JSON, or text from a form or query) as ``schema`` wants it; 400 naming the option otherwise."""
    kind = schema.get("type")
    try:
        if kind == "integer":
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            converted: Any = int(value)
        elif kind == "number":
            if isinstance(value, bool):
                raise ValueError
            converted = float(value)
            if not math.isfinite(converted):
                raise ValueError
        elif kind == "boolean":
            if isinstance(value, bool):
                converted = value
            elif str(value).lower() in ("true", "1", "false", "0"):
                converted = str(value).lower() in ("true", "1")
            else:
                raise ValueError
        elif schema.get("contentMediaType") == "application/json" and not isinstance(value, str):
            converted = json.dumps(value)  # a JSON body's object or boolean for an option that takes JSON text
        else:
            converted = str(value) if not isinstance(value, (dict, list)) else None
            if converted is None:
                raise ValueError
    except (TypeError, ValueError):
        raise bad_request(f"option {name!r} must be {'an' if kind == 'integer' else 'a'} {kind}, got {value!r}") from None
    low, high = schema.get("minimum"), schema.get("maximum")
    if (low is not None and converted < low) or (high is not None and converted > high):
        raise bad_request(
            f"option {name!r} must be in [{low:g}, {high:g}], got {converted!r}"
            if low is not None and high is not None
            else f"option {name!r} is out of range: {converted!r}"
        )
    if "enum" in schema and converted not in schema["enum"]:
        raise bad_request(f"option {name!r} must be one of {', '.join(map(str, schema['enum']))}, got {converted!r}")
    return converted
