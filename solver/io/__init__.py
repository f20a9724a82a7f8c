"""Fitted models out of the process: portable versioned model files (``model_io``) and
ONNX export (``export``).
"""
