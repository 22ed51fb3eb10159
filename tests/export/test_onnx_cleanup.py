"""The ONNX graph clean-up after jax2onnx: an ``Identity`` copying an initializer (a weight's
``stop_gradient``) is dropped and its readers read the initializer (ONNX Runtime's optimizer
rejected such a graph of ``retinanet_resnet50_fpn_torchvision``)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


def test_identity_of_an_initializer_is_dropped_and_values_are_kept():
    from onnx import TensorProto, helper, numpy_helper

    from jaxdet.export.exporter import _drop_constant_identities

    w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")
    graph = helper.make_graph(
        [helper.make_node("Identity", ["w"], ["w_copy"]),
         helper.make_node("Mul", ["x", "w_copy"], ["y"]),
         helper.make_node("Identity", ["y"], ["z"])],  # not of an initializer: kept
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3])], [w])
    _drop_constant_identities(graph)
    assert [(n.op_type, list(n.input)) for n in graph.node] == [
        ("Mul", ["x", "w"]), ("Identity", ["y"])]
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.ones((2, 3), np.float32)
    got = ort.InferenceSession(model.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, np.arange(6, dtype=np.float32).reshape(2, 3))
