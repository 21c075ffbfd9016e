"""The calibrated model hb_mapper builds for a ``node_info`` ``OutputType: int16`` fix, made from the int8 one.

hb_mapper (Horizon OE 1.x, horizon_nn/HMCT) does more than switch the named tensor to int16 (measured on the real
PP-OCR cls bayes-e set rebuilt with ``node_info: {Relu@4: {OutputType: int16}, Mul@0: {OutputType: int16}}``; the
rebuilt calibrated model differs from the int8 one only in the points below, and the model this module makes from
the int8 one gives the rebuilt one's outputs to the last bit in onnxruntime and in Horizon's runtime):

1. the output HzCalibration of the named node quantizes to int16 at its int8 threshold (``scales = thresholds /
   32767``): relu_4 6.5862 -> scale 2.0100e-4;
2. when that node is a table-lookup activation (``HzHardSwish``, compiled to HzLut2Layer), its input's HzCalibration
   is switched to int16 as well (Mul@0's input ``conv2d_53.tmp_0`` there);
3. HMCT's ``AdjustConvQuantParams`` pass (``hmct/quantizer/calibrater/post/adjust_conv_quant_params.py``): for each
   Conv whose input HzCalibration is int16, the output threshold becomes ``max(max(weight thresholds) * input
   threshold, output threshold)`` (per channel when the output has one threshold per channel); where that differs
   from the output HzCalibration's thresholds, an int16 HzCalibration with the new thresholds is inserted before it
   (a requantization: Conv@8 -> 6.7445 before the int8 5.6107; Conv@1 + Relu@0 -> 13.8969 before the int8 6.0039).
"""

from __future__ import annotations

from collections.abc import Iterable

import onnx

__all__ = ["int16_calibration", "TABLE_ACTIVATIONS"]

#: Op types of the calibrated model that hb_mapper computes with a table (HzLut2Layer in int16) and whose input it
#: therefore also quantizes to int16 when their output is set to int16 (measured: HzHardSwish, see above).
TABLE_ACTIVATIONS = frozenset({"HzHardSwish"})

#: Ops HMCT's ``find_input_calibration`` / ``find_output_calibration`` look through
#: (``hmct/common/misc/find_calibration_node.py``, ``can_be_skipped``).
_SKIPPED = frozenset({"MaxPool", "GlobalMaxPool", "Relu", "Reshape", "Transpose", "ReduceMax", "Split", "Slice",
                      "Gather", "ScatterND"})

_INT16_MAX = 32767.0


class _Graph:
    """Producer and consumer indices of one graph's nodes (rebuilt after each insertion)."""

    def __init__(self, g: onnx.GraphProto):
        self.g = g
        self.producer = {o: n for n in g.node for o in n.output if o}
        self.consumers: dict[str, list[onnx.NodeProto]] = {}
        for n in g.node:
            for x in n.input:
                if x:
                    self.consumers.setdefault(x, []).append(n)

    def input_calibration(self, n: onnx.NodeProto, index: int | None) -> onnx.NodeProto | None:
        """HMCT's ``find_input_calibration``: the HzCalibration feeding input ``index`` of ``n`` (None: the first
        input that has one), looking through :data:`_SKIPPED` producers."""
        prevs = [self.producer.get(x) for x in (n.input if index is None else n.input[index:index + 1]) if x]
        prevs = [p for p in prevs if p is not None]
        for p in prevs:
            if p.op_type == "HzCalibration":
                return p
        for p in prevs:
            if p.op_type in _SKIPPED:
                return self.input_calibration(p, None)
        return None

    def output_calibration(self, n: onnx.NodeProto) -> onnx.NodeProto | None:
        """HMCT's ``find_output_calibration``: the first HzCalibration after ``n``, looking through :data:`_SKIPPED`
        consumers; a Conv whose only consumer is an Add: the Add's."""
        nxt = self.consumers.get(n.output[0], []) if n.output else []
        if n.op_type == "Conv" and len(nxt) == 1 and nxt[0].op_type == "Add":
            return self.output_calibration(nxt[0])
        todo = [c for o in n.output for c in self.consumers.get(o, [])]
        while todo:
            c = todo.pop(0)
            if c.op_type == "HzCalibration":
                return c
            if c.op_type in _SKIPPED:
                todo.extend(d for o in c.output for d in self.consumers.get(o, []))
        return None


def _attrs(n: onnx.NodeProto) -> dict[str, onnx.AttributeProto]:
    return {a.name: a for a in n.attribute}


def _qtype(n: onnx.NodeProto) -> str:
    a = _attrs(n).get("qtype")
    return a.s.decode() if a is not None else "int8"


def _set_int16(n: onnx.NodeProto, thresholds: list[float] | None = None) -> None:
    """``qtype`` int16, ``thresholds`` (default: kept) and ``scales = thresholds / 32767``."""
    attrs = _attrs(n)
    if thresholds is None:
        thresholds = list(attrs["thresholds"].floats)
    for name, value in (("qtype", "int16"), ("thresholds", thresholds),
                        ("scales", [t / _INT16_MAX for t in thresholds])):
        if name in attrs:
            n.attribute.remove(attrs[name])
        n.attribute.append(onnx.helper.make_attribute(name, value))


def _adjust_convs(g: onnx.GraphProto) -> None:
    """HMCT's AdjustConvQuantParams pass (module docstring, point 3) on ``g``, in place."""
    k = 0
    for conv in [n for n in g.node if n.op_type == "Conv"]:
        ix = _Graph(g)
        cin, cw, cout = (ix.input_calibration(conv, 0), ix.input_calibration(conv, 1) if len(conv.input) > 1 else
                         None, ix.output_calibration(conv))
        if cin is None or cw is None or cout is None or _qtype(cin) != "int16":
            continue
        t_in = max(_attrs(cin)["thresholds"].floats)
        t_w = list(_attrs(cw)["thresholds"].floats)
        t_out = list(_attrs(cout)["thresholds"].floats)
        new = ([max(max(t_w) * t_in, t_out[0])] if len(t_out) == 1 else
               [max(t_w[c] * t_in, t_out[c]) for c in range(len(t_w))])
        if [float(x) for x in new] == [float(x) for x in t_out]:
            continue
        req = onnx.NodeProto()
        req.CopyFrom(cout)
        req.name = f"{cout.name}_int16_requantize{k}"
        mid = f"{cout.input[0]}_int16_requantized{k}"
        del req.output[:]
        req.output.append(mid)
        _set_int16(req, new)
        cout.input[0] = mid
        g.node.insert(list(g.node).index(cout), req)
        k += 1


def int16_calibration(model: onnx.ModelProto, nodes: Iterable[str]) -> onnx.ModelProto:
    """A copy of a Horizon calibrated model as hb_mapper rebuilds it when the HzCalibration nodes named ``nodes``
    (activation calibrations) are set to int16 through ``node_info`` ``OutputType: int16`` of their producers.

    The three steps of the module docstring: the named nodes quantize to int16 at their thresholds (``qtype`` int16,
    ``scales = thresholds / 32767``); the input calibration of a named node's :data:`TABLE_ACTIVATIONS` producer
    too; then HMCT's AdjustConvQuantParams inserts an int16 requantization before the output calibration of each
    Conv reading an int16 value whose output threshold it raises. Names not found, or nodes without
    ``thresholds``, are left as they are. Thresholds hb_mapper recalibrates are not modelled: on the set measured
    it kept them.
    """
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    ix = _Graph(g)
    want = set(nodes)
    chosen = [n for n in g.node if n.op_type == "HzCalibration" and n.name in want and "thresholds" in _attrs(n)]
    for n in list(chosen):
        p = ix.producer.get(n.input[0]) if n.input else None
        if p is not None and p.op_type in TABLE_ACTIVATIONS:
            c = ix.input_calibration(p, 0)
            if c is not None and "thresholds" in _attrs(c) and c not in chosen:
                chosen.append(c)
    for n in chosen:
        _set_int16(n)
    _adjust_convs(g)
    return out
