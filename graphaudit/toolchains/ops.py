"""Op knowledge of the toolchains as data: wrapper ops, Horizon float and fixed-point equivalences, name suffixes.

Facts about Horizon ops come from the real OE 1.x toolchain's output (hb_mapper 1.24.3, horizon_nn 1.1.0:
``docs/HORIZON.md`` in this repository, section "Observed on the real toolchain") and from HMCT's public sources
(``dg-nn-toolkit`` wheel). This module imports only :mod:`graphaudit.stage`; every other layer imports it.
"""

from __future__ import annotations

import re

from ..stage import PARAM_KINDS, NodeInfo, StageGraph

__all__ = ["HORIZON_DOMAIN", "WRAPPER_KINDS", "LAYOUT_PERMS", "EQUIVALENT_OPS", "FIXED_POINT_OP",
           "FIXED_POINT_TENSOR_SUFFIX", "FIXED_POINT_STORAGE", "DECOMPOSED_TAILS", "ABSORBABLE_ACTIVATIONS",
           "FOLDABLE_OPS", "FUSIBLE_FOLLOWERS", "WEIGHTED_OPS", "QUANTIZE_OPS", "DEQUANTIZE_OPS",
           "DEQUANTIZED_VALUE_OPS", "QUANT_CHAIN_OPS", "TABLE_LOOKUP_OPS", "SHORT_OP_NAMES", "DYNAMIC_QUANT_OPS",
           "QOPERATOR_OPS", "quant_format", "op_class", "norm_domain",
           "is_fixed_point", "is_fixed_point_op", "is_table_lookup", "rescales_channels", "wrapper_kind", "trace_back"]

#: ONNX domain of Horizon's custom ops (logs print ``Opset version: ['ai.onnx v11', 'horizon v1']``).
HORIZON_DOMAIN = "horizon"

#: Ops that pass one value through, possibly changing its numeric form, keyed by (domain, op_type).
#: "quantize": QDQ / Horizon (fake) quantization; "convert": Cast; "layout": NCHW<->NHWC Transpose;
#: "preprocess": Horizon HzPreprocess; "identity": Identity, Dropout (inference). (An HzCalibration with channel
#: scales is a "rescale" wrapper: :func:`wrapper_kind`.)
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

#: Op types of Horizon's fixed-point ops (HzSQuantized*, HzSElementwise*, HzSPRelu, HzQuantized*, HzLut,
#: HzLut2Layer, HzRequantize: integer tensors, no public bit-exact specification; docs/HORIZON.md section 3).
FIXED_POINT_OP = re.compile(r"^Hz(S[A-Z]|Quantized|Lut|Requantize)")

#: Prefixes of Horizon's table-lookup ops (HzLut, HzLut2Layer, HzSLut): one op that computes any unary activation.
TABLE_LOOKUP_OPS = ("HzLut", "HzSLut")

#: Suffix that hb_mapper 1.x appends to every tensor of the fixed-point quantized stage.
FIXED_POINT_TENSOR_SUFFIX = "_quantized"

#: HzCalibration qtype -> (the fixed-point stage's dtype of the tensor, offset added before scaling): uint8 values
#: are stored as int8 with -128 (docs/HORIZON.md section 7).
FIXED_POINT_STORAGE = {"int8": ("INT8", 0), "uint8": ("INT8", 128), "int16": ("INT16", 0)}

#: Ops that turn a float into its integer code (ONNX and Horizon).
QUANTIZE_OPS = frozenset({"QuantizeLinear", "HzQuantize"})

#: Ops that turn an integer code back into a float (ONNX and Horizon).
DEQUANTIZE_OPS = frozenset({"DequantizeLinear", "HzDequantize"})

#: Ops whose output is the fake-quantized float value: a dequantization, or Horizon's float-to-float HzCalibration.
DEQUANTIZED_VALUE_OPS = DEQUANTIZE_OPS | {"HzCalibration"}

#: Single-input ops of a fake-quantization chain on one value (HzCalibration, Q/DQ of ONNX and Horizon).
QUANT_CHAIN_OPS = QUANTIZE_OPS | DEQUANTIZED_VALUE_OPS

#: Short names of wrapper ops, as diff graphs write them on edge badges.
SHORT_OP_NAMES = {"QuantizeLinear": "Q", "DequantizeLinear": "DQ", "HzCalibration": "HzCal", "HzQuantize": "HzQ",
                  "HzDequantize": "HzDQ", "Transpose": "T", "Identity": "Id", "HzPreprocess": "HzPreprocess"}

#: Activations a quantizer can absorb into QuantizeLinear (zero_point at qmin clamps at 0).
ABSORBABLE_ACTIVATIONS = {"Relu", "Clip"}

#: Ops a toolchain folds into a neighbouring Conv/Gemm/MatMul when their other inputs are constant
#: (onnxruntime ConvBNFusion/ConvAddFusion/ConvMulFusion; hb_mapper folds BatchNormalization forward into the
#: Conv before it and backward into the Conv after it).
FOLDABLE_OPS = {"BatchNormalization", "Add", "Sub", "Mul", "Div"}

#: Ops that a toolchain folds into the preceding Conv/Gemm/MatMul when their other inputs are constant: the
#: foldable ops and the activations a fused kernel applies.
FUSIBLE_FOLLOWERS = FOLDABLE_OPS | {"Relu", "Clip", "LeakyRelu"}

#: Ops that carry weights (input 1): toolchains fold constant followers into them, quantizers quantize their weights.
WEIGHTED_OPS = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul"})

#: onnxruntime's dynamic quantization (``quantize_dynamic``): activations quantized at run time
#: (DynamicQuantizeLinear, or inside the com.microsoft op), integer kernels; onnxruntime's operator docs.
DYNAMIC_QUANT_OPS = frozenset({"DynamicQuantizeLinear", "ConvInteger", "MatMulInteger", "DynamicQuantizeMatMul",
                               "MatMulIntegerToFloat", "DynamicQuantizeLSTM"})

#: The QOperator format (``quantize_static(quant_format=QOperator)``): ops that take and return quantized tensors
#: with their scales and zero points as inputs (ai.onnx QLinearConv/QLinearMatMul, com.microsoft QLinear*, QGemm...).
QOPERATOR_OPS = frozenset({"QLinearConv", "QLinearMatMul", "QGemm", "QAttention", "QEmbedLayerNormalization",
                           "QOrderedMatMul", "QOrderedGelu", "QOrderedLayerNormalization"})


def quant_format(node: NodeInfo) -> str | None:
    """``"dynamic"``, ``"QOperator"`` or ``"QDQ"`` for a node of one of onnxruntime's quantization formats (default
    or com.microsoft domain), else None (Horizon's ops have their own census, S103)."""
    if norm_domain(node.domain) not in ("", "com.microsoft"):
        return None
    if node.op_type in DYNAMIC_QUANT_OPS:
        return "dynamic"
    if node.op_type in QOPERATOR_OPS or node.op_type.startswith("QLinear"):
        return "QOperator"
    if node.op_type in ("QuantizeLinear", "DequantizeLinear"):
        return "QDQ"
    return None


def norm_domain(domain: str) -> str:
    """``""`` for the default ONNX domain (also spelled ``ai.onnx``), else the domain."""
    return "" if domain == "ai.onnx" else domain


def op_class(node: NodeInfo) -> str:
    """Op type with Horizon float and fixed-point ops mapped to the standard op they compute.

    ``HzHardSwish`` -> ``HardSwish``, ``HzSQuantizedConv`` -> ``Conv``; other ops are their own class.
    """
    return EQUIVALENT_OPS.get(node.op_type, node.op_type)


def is_fixed_point_op(op_type: str) -> bool:
    """True for the op type of one of Horizon's fixed-point ops (see :data:`FIXED_POINT_OP`)."""
    return FIXED_POINT_OP.match(op_type) is not None


def is_fixed_point(node: NodeInfo) -> bool:
    """True for Horizon's fixed-point ops (integer tensors, no float semantics in the file)."""
    return norm_domain(node.domain) == HORIZON_DOMAIN and is_fixed_point_op(node.op_type)


def is_table_lookup(node: NodeInfo) -> bool:
    """True for Horizon's table-lookup ops (HzLut*, HzSLut*), which implement any unary activation."""
    return node.op_type.startswith(TABLE_LOOKUP_OPS)


def rescales_channels(node: NodeInfo) -> bool:
    """True for an HzCalibration with ``channel_scales`` other than 1: it multiplies each channel as well as
    quantizing it (hb_mapper balances channels this way and divides the next Conv's weights; seen in PP-OCRv4
    det), so its output is not the value it reads."""
    if node.op_type != "HzCalibration":
        return False
    cs = node.attributes.get("channel_scales")
    return isinstance(cs, list) and any(abs(float(v) - 1.0) > 1e-6 for v in cs)


def _param_like(stage: StageGraph, name: str, depth: int = 3) -> bool:
    """A weight, or a weight seen through wrapper ops (e.g. an HzCalibration on HzPreprocess's weight)."""
    t = stage.tensors.get(name)
    if t is None:
        return False
    if t.is_param:
        return True
    p = stage.nodes.get(t.producer) if t.producer else None
    if p is None or depth == 0 or not p.inputs:
        return False
    if (norm_domain(p.domain), p.op_type) not in WRAPPER_KINDS:
        return False
    return _param_like(stage, p.inputs[0], depth - 1)


def wrapper_kind(stage: StageGraph, node: NodeInfo) -> str | None:
    """The wrapper kind of a node (see :data:`WRAPPER_KINDS`) or ``None`` when it computes something.

    A node is a wrapper when its op is listed, its first input is its only non-weight input
    and only its first output is used. Transpose counts only with a layout permutation; an HzCalibration that
    also rescales channels (:func:`rescales_channels`) is of kind ``"rescale"``.
    """
    kind = WRAPPER_KINDS.get((norm_domain(node.domain), node.op_type))
    if kind is None or not node.inputs or not node.inputs[0] or node.parent is not None:
        return None
    if not node.outputs or not node.outputs[0]:
        return None
    if kind == "quantize" and rescales_channels(node):
        kind = "rescale"
    if kind == "layout" and node.op_type == "Transpose":
        perm = node.attributes.get("perm")
        if not isinstance(perm, list) or tuple(perm) not in LAYOUT_PERMS:
            return None
    tensors = stage.tensors
    for name in node.inputs[1:]:
        if name:
            t = tensors.get(name)  # a weight itself (a QDQ node's scale and zero point) decides without a call
            if t is None or (t.kind not in PARAM_KINDS and not _param_like(stage, name)):
                return None
    for name in node.outputs[1:]:
        if name and tensors[name].consumers:
            return None
    return kind


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
