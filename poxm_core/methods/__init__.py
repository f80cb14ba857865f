"""Methods of docs/methods.md: one module each, registered in `registry.METHODS` (see docs/methods.md)."""
from poxm_core.methods.base import Batch, HeadContext, Method, translated_loss
from poxm_core.methods.registry import METHODS, REWARD_METHOD, get_method, head_grid, register_method

__all__ = ["METHODS", "REWARD_METHOD", "get_method", "head_grid", "register_method", "Method", "Batch", "HeadContext", "translated_loss"]
