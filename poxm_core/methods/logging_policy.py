"""The logging policy rho (docs/protocol.md, §6): nothing to train; at test time a slate is drawn from rho on C(x).

Its rows (epoch 0) are the baseline every trained method is compared with; IS weights of rho on its
own log are 1 up to rounding, so its IS/SNIS estimates are the logged mean reward per slate.
"""
from __future__ import annotations

from poxm_core.methods.base import Method


class Logging(Method):
    name = "logging"
    trains = False
    train_support = "none"
    test_policy = "rho"
