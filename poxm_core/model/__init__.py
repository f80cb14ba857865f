"""Shared core model: sparse encoder + linear head, the logging model, chunked top-k (docs/protocol.md)."""
from poxm_core.model.core import CoreModel, SparseEncoder, encode, resolve_device
from poxm_core.model.logging_model import alpha_sample, train_logging_model
from poxm_core.model.topk import chunked_topk

__all__ = ["CoreModel", "SparseEncoder", "encode", "resolve_device", "alpha_sample", "train_logging_model",
           "chunked_topk"]
