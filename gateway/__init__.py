"""The image gateway: an image-native HTTP API in front of the Triton server's pipelines.

POST a photo (raw body, multipart, base64 JSON or a URL) to ``/v1/pipelines/{name}`` and get the task's answer as
JSON. The pipelines come from the server (:mod:`.catalog`); a task's answer is its module of :mod:`.answers`; the
OpenAPI document is generated from the same roles (:mod:`.openapi`). It talks to Triton over gRPC, inference and
metadata only, and imports the serving library (vision_serving), never the development tools.
"""
