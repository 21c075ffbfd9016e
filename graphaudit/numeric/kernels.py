"""Which (domain, op_type) pairs the installed onnxruntime can execute on the CPU."""

from __future__ import annotations

from functools import lru_cache

__all__ = ["ort_has_kernel", "ort_version", "cpu_kernels"]


@lru_cache(maxsize=1)
def cpu_kernels() -> frozenset[tuple[str, str]]:
    """(domain, op_type) of every kernel registered for the CPU execution provider.

    Read from onnxruntime's own registry (``onnxruntime.capi._pybind_state.get_all_opkernel_def``);
    ``ai.onnx`` is reported as ``""``.
    """
    from onnxruntime.capi import _pybind_state as C

    out = set()
    for k in C.get_all_opkernel_def():
        if k.provider == "CPUExecutionProvider":
            out.add(("" if k.domain in ("", "ai.onnx") else k.domain, k.op_name))
    return frozenset(out)


def ort_has_kernel(domain: str, op_type: str) -> bool:
    """True when stock onnxruntime (CPU) has a kernel for this op.

    Functions of the default domain (expanded by onnxruntime, e.g. ``HardSwish`` in old builds)
    count as runnable when ``onnx.defs`` knows a function body for them.
    """
    d = "" if domain == "ai.onnx" else domain
    if (d, op_type) in cpu_kernels():
        return True
    if d == "":
        import onnx

        try:
            schema = onnx.defs.get_schema(op_type)
        except onnx.defs.SchemaError:
            return False
        return schema.has_function or schema.has_context_dependent_function
    return False


def ort_version() -> str:
    """The installed onnxruntime version string."""
    import onnxruntime

    return onnxruntime.__version__
