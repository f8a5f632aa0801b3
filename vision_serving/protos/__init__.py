"""Triton's model configuration schema, vendored so the serving image needs no client library.

``model_config.proto`` is Triton's ``protobuf/model_config.proto`` from the
triton-inference-server/common repository at tag ``r24.10`` (Triton 2.51, commit
578491fc3944f77d16a6a38e3d7691c485c47ba0; r24.09 has the same file), unchanged.
``model_config_pb2.py`` is the module generated from it as shipped in the tritonclient
2.51.0 wheel (``tritonclient/grpc/model_config_pb2.py``), copied byte for byte: its
serialized descriptor is the one protoc makes from this ``.proto``. Both are NVIDIA's,
under the BSD-3-Clause license in ``LICENSE`` (the tritonclient wheel's LICENSE.txt; the
``.proto`` carries the same notice). tests/unit/vision_serving/test_protos.py checks the
hashes below, that the module equals the installed tritonclient's copy (so a tritonclient
upgrade in the dev set that changes the schema is caught) and that the ``.proto`` declares
every field and enum value of the module's descriptor.

To update: replace both files from a newer release, then these constants.
"""

from __future__ import annotations

SOURCE_REPOSITORY = "triton-inference-server/common"
SOURCE_TAG = "r24.10"
SOURCE_COMMIT = "578491fc3944f77d16a6a38e3d7691c485c47ba0"
TRITONCLIENT_VERSION = "2.51.0"
PROTO_SHA256 = "34e1efdae79efe78986ad72b94684d9b45be7c412e92d2532a8b90525dd07ff5"
MODULE_SHA256 = "1d6180fde27b3ec923a2fb232261bc6b625199213f19ae556d5baa456642b571"
