"""``custom_op_rewrites``: custom ops TensorRT has no importer for, rewritten into standard ONNX ops.

Each rewrite is its own module in this package (``convolution_2d_transpose_bias``), with a
reference implementation of the op in ``reference_ops`` to verify it; :data:`CUSTOM_OP_REWRITES`
says which rewrite handles which ``(domain, op_type)``.
"""

from __future__ import annotations

import onnx_graphsurgeon as gs

from builders.passes import convolution_2d_transpose_bias
from builders.passes.graph import STANDARD_DOMAINS, GraphPass, PassError

MEDIAPIPE_DOMAIN = "mediapipe"

# (domain, op_type) -> a whole-graph pass that rewrites every such node into standard ONNX ops.
# MediaPipe's transposed convolution appears as mediapipe.Convolution2DTransposeBias (with
# attributes) or, from tf2onnx 1.17, as TFL_Convolution2DTransposeBias in the default domain with
# none: builders/passes/convolution_2d_transpose_bias.py handles both. Add entries for more ops.
CUSTOM_OP_REWRITES: dict[tuple[str, str], GraphPass] = {
    (MEDIAPIPE_DOMAIN, "Convolution2DTransposeBias"): convolution_2d_transpose_bias.convolution_2d_transpose_bias,
    ("", "Convolution2DTransposeBias"): convolution_2d_transpose_bias.convolution_2d_transpose_bias,
    ("", "TFL_Convolution2DTransposeBias"): convolution_2d_transpose_bias.convolution_2d_transpose_bias,
}


def custom_op_rewrites(graph: gs.Graph) -> int:
    """Replace custom ops with standard ops through :data:`CUSTOM_OP_REWRITES`.

    Before::

        x --<domain>.<Op>--> y        (TensorRT has no importer for it: needs a plugin)

    After::

        x --(standard ONNX ops)--> y  (see each rewrite's docstring)

    Domains no node uses any more are dropped from the model's opset imports.
    onnxruntime cannot run the model before this pass, so ``fix`` cannot
    compare outputs for it; ``export`` instead compares the rewritten graph
    with the unfixed one run with a reference implementation of the op
    (``builders/passes/reference_ops.py``, onnxruntime-extensions).
    """
    passes = list(
        dict.fromkeys(rewrite for node in graph.nodes if (rewrite := CUSTOM_OP_REWRITES.get((node.domain or "", node.op))) is not None)
    )
    rewritten = 0
    for rewrite in passes:
        try:
            rewritten += rewrite(graph)
        except ValueError as error:
            raise PassError(f"custom_op_rewrites: {error}") from None
    if rewritten:
        graph.cleanup().toposort()
        used = {node.domain or "" for node in graph.nodes}
        graph.import_domains = [entry for entry in (graph.import_domains or []) if entry.domain in STANDARD_DOMAINS or entry.domain in used]
    return rewritten
