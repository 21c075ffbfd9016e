"""Op knowledge of the toolchains as data: wrapper ops, Horizon float and fixed-point equivalences, name suffixes.

Facts about Horizon ops come from the real OE 1.x toolchain's output (hb_mapper 1.24.3, horizon_nn 1.1.0:
``docs/HORIZON.md`` in this repository, section "Observed on the real toolchain") and from HMCT's public sources
(``dg-nn-toolkit`` wheel). This module imports only :mod:`graphaudit.stage`; every other layer imports it.
"""

from __future__ import annotations

from ..stage import NodeInfo, StageGraph

__all__ = ["HORIZON_DOMAIN", "WRAPPER_KINDS", "LAYOUT_PERMS", "EQUIVALENT_OPS", "FIXED_POINT_OPS",
           "FIXED_POINT_TENSOR_SUFFIX", "DECOMPOSED_TAILS", "ABSORBABLE_ACTIVATIONS", "FOLDABLE_OPS",
           "op_class", "norm_domain", "is_fixed_point", "trace_back"]

#: ONNX domain of Horizon's custom ops (logs print ``Opset version: ['ai.onnx v11', 'horizon v1']``).
HORIZON_DOMAIN = "horizon"

#: Ops that pass one value through, possibly changing its numeric form, keyed by (domain, op_type).
#: "quantize": QDQ / Horizon (fake) quantization; "convert": Cast; "layout": NCHW<->NHWC Transpose;
#: "preprocess": Horizon HzPreprocess; "identity": Identity, Dropout (inference). (An HzCalibration with channel
#: scales is a "rescale" wrapper: lineage/view.py.)
WRAPPER_KINDS: dict[tuple[str, str], str] = {
    ("", "Identity"): "identity",
    ("", "Dropout"): "identity",
    ("", "QuantizeLinear"): "quantize",
    ("", "DequantizeLinear"): "quantize",
    ("com.microsoft", "QuantizeLinear"): "quantize",
    ("com.microsoft", "DequantizeLinear"): "quantize",
    (HORIZON_DOMAIN, "HzCalibration"): "quantize",
    (HORIZON_DOMAIN, "HzQuantize"): "quantize",
    (HORIZON_DOMAIN, "HzDequantize"): "quantize",
    (HORIZON_DOMAIN, "HzRequantize"): "quantize",
    ("", "Cast"): "convert",
    ("", "Transpose"): "layout",
    (HORIZON_DOMAIN, "HzPreprocess"): "preprocess",
    (HORIZON_DOMAIN, "HzSQuantizedPreprocess"): "preprocess",
}

#: Transpose permutations that convert between NCHW and NHWC (rank 4) or NCW and NWC (rank 3).
LAYOUT_PERMS = {(0, 2, 3, 1), (0, 3, 1, 2), (0, 2, 1)}

#: Float Horizon ops and their standard ONNX equivalents (HzHardSwish = HardSwish, ...), and the fixed-point
#: ops of the 1.x quantized stage with the float op they implement (seen in real ``*_quantized_model.onnx``:
#: node names are kept from optimized_float, so ``Conv@3`` is an HzSQuantizedConv there). HzLut (a table
#: lookup) implements any unary activation and is matched by name and position, not by op.
EQUIVALENT_OPS = {
    "HzHardSwish": "HardSwish",
    "HzGelu": "Gelu",
    "HzSoftmax": "Softmax",
    "HzLayerNorm": "LayerNormalization",
    "HzReluX": "Clip",
    "HzPad": "Pad",
    "HzSpaceToDepth": "SpaceToDepth",
    "HzSQuantizedConv": "Conv",
    "HzSQuantizedConvTranspose": "ConvTranspose",
    "HzSElementwiseAdd": "Add",
    "HzSElementwiseMul": "Mul",
    "HzSElementwiseSub": "Sub",
    "HzSQuantizedGlobalAveragePool": "GlobalAveragePool",
    "HzQuantizedGlobalAveragePool": "GlobalAveragePool",
    "HzSQuantizedAveragePool": "AveragePool",
    "HzQuantizedAveragePool": "AveragePool",
    "HzQuantizedMaxPool": "MaxPool",
    "HzSQuantizedMaxPool": "MaxPool",
    "HzSQuantizedPreprocess": "HzPreprocess",
    "HzSQuantizedMatmul": "MatMul",
    "HzSQuantizedReduceMean": "ReduceMean",
    "HzQuantizedResize": "Resize",
    "HzSQuantizedResize": "Resize",
    "HzQuantizedResizeUpsample": "Resize",
    "HzQuantizedRoiResize": "Resize",
    "HzSPRelu": "PRelu",
    "HzPRelu": "PRelu",
    "HzQuantizedConcat": "Concat",
    "HzSQuantizedConcat": "Concat",
}

#: Ops that a toolchain writes as a chain of simpler ops (or back), with the ops that can end that chain: the
#: tensor named alike after such a rewrite holds the same value although its producer's op differs
#: (HardSwish = x * HardSigmoid(x), or (x * Clip(x + 3, 0, 6)) / 6 in Paddle exports; HzSwish = x * Sigmoid(x);
#: Gelu and LayerNormalization end in Mul/Add; hb_mapper for bernoulli2 writes a large GlobalAveragePool as a chain
#: of averaging depthwise Convs).
DECOMPOSED_TAILS = {
    "HardSwish": {"Mul", "Div"},
    "HzSwish": {"Mul"},
    "Gelu": {"Mul"},
    "LayerNormalization": {"Add", "Mul"},
    "GlobalAveragePool": {"Conv"},  # bernoulli2: split into depthwise Convs (<node>_SPLIT_WITH_DEPTHWISE_CONV_k)
}

#: Prefixes of the fixed-point ops (HzSQuantized*, HzQuantized*, HzSElementwise*, HzLut, HzLut2Layer).
FIXED_POINT_OPS = ("HzSQuantized", "HzQuantized", "HzSElementwise", "HzLut", "HzSLut")

#: Suffix that hb_mapper 1.x appends to every tensor of the fixed-point quantized stage.
FIXED_POINT_TENSOR_SUFFIX = "_quantized"

#: Activations a quantizer can absorb into QuantizeLinear (zero_point at qmin clamps at 0).
ABSORBABLE_ACTIVATIONS = {"Relu", "Clip"}

#: Ops a toolchain folds into a neighbouring Conv/Gemm/MatMul when their other inputs are constant
#: (onnxruntime ConvBNFusion/ConvAddFusion/ConvMulFusion; hb_mapper folds BatchNormalization forward into the
#: Conv before it and backward into the Conv after it).
FOLDABLE_OPS = {"BatchNormalization", "Add", "Sub", "Mul", "Div"}


def norm_domain(domain: str) -> str:
    """``""`` for the default ONNX domain (also spelled ``ai.onnx``), else the domain."""
    return "" if domain == "ai.onnx" else domain


def op_class(node: NodeInfo) -> str:
    """Op type with Horizon float and fixed-point ops mapped to the standard op they compute.

    ``HzHardSwish`` -> ``HardSwish``, ``HzSQuantizedConv`` -> ``Conv``; other ops are their own class.
    """
    return EQUIVALENT_OPS.get(node.op_type, node.op_type)


def is_fixed_point(node: NodeInfo) -> bool:
    """True for Horizon's fixed-point ops (integer tensors, no float semantics in the file)."""
    return norm_domain(node.domain) == HORIZON_DOMAIN and node.op_type.startswith(FIXED_POINT_OPS)


def trace_back(stage: StageGraph, name: str, max_depth: int = 8) -> str:
    """Follow a tensor back through producers that are wrapper ops (first input) to the wrapped value.

    E.g. HzPreprocess's weight behind an HzCalibration, or a graph input behind a Cast.
    """
    cur = name
    for _ in range(max_depth):
        t = stage.tensors.get(cur)
        p = stage.nodes.get(t.producer) if t is not None and t.producer else None
        if p is None or not p.inputs or p.outputs[0] != cur:
            break
        if (norm_domain(p.domain), p.op_type) not in WRAPPER_KINDS or p.op_type == "HzPreprocess":
            break
        cur = p.inputs[0]
    return cur
