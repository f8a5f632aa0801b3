"""Graph rewrites of custom ops (onnx-graphsurgeon), with reference implementations to verify them.

Registered for ``fix`` through ``builders.graph_fixes.CUSTOM_OP_REWRITES``.
"""
