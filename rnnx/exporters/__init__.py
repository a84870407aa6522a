"""Framework models to ONNX with native recurrent nodes (see the exporters issue)."""
