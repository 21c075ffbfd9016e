"""Everything that touches onnxruntime (the only package that imports it)."""

from .kernels import ort_has_kernel, ort_version

__all__ = ["ort_has_kernel", "ort_version"]
