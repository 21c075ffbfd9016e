"""Rewrites that toolchains are documented to make, by the pattern name graphaudit gives them.

A pattern name is ``"<ops of stage a> -> <ops of stage b>"`` (ops joined by ``+``), or ``"<activation> absorbed
into quantization"``. Sources: onnxruntime graph optimizations (ConvBNFusion, ConvAddFusion, ConvMulFusion,
MatMulAddFusion, function inlining of HardSwish), the onnxruntime QDQ quantizer (activation removal), Horizon
optimized_float (docs/HORIZON.md section 1).
"""

from __future__ import annotations

__all__ = ["KNOWN_PATTERNS"]

#: Known rewrite -> the confidence given to a region that shows it.
KNOWN_PATTERNS: dict[str, float] = {
    "Conv+BatchNormalization -> Conv": 1.0,
    "Conv+BatchNormalization+Relu -> Conv": 1.0,
    "Conv+BatchNormalization+Clip -> Conv": 1.0,
    "Conv+Relu -> Conv": 0.95,
    "Conv+Add -> Conv": 0.95,
    "Conv+Mul -> Conv": 0.95,
    "Conv+Mul+Add -> Conv": 0.95,
    "ConvTranspose+BatchNormalization -> ConvTranspose": 0.95,
    "MatMul+Add -> Gemm": 1.0,
    "Gemm -> Conv": 0.95,
    "MatMul -> Conv": 0.9,
    "HardSwish -> HardSigmoid+Mul": 1.0,
    "HardSwish -> HzHardSwish": 1.0,
    "Sigmoid+Mul -> HzSwish": 1.0,
    "Gelu -> HzGelu": 1.0,
    "Softmax -> HzSoftmax": 1.0,
    "LayerNormalization -> HzLayerNorm": 1.0,
    "Reshape -> Transpose": 0.8,
    "BatchNormalization -> Mul+Add": 0.9,
    "Relu absorbed into quantization": 0.95,
    "Clip absorbed into quantization": 0.95,
}
