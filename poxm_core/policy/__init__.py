"""Policies: what a method trains (docs/methods.md, 'The policy interface')."""
from poxm_core.policy.base import Bag, Policy
from poxm_core.policy.registry import POLICIES, build_policy

__all__ = ["Bag", "Policy", "POLICIES", "build_policy"]
