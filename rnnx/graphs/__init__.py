"""ONNX to ONNX: find recurrent nodes, build stacks from canonical weights."""
