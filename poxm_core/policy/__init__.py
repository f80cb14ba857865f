"""Policies: what a method trains (docs/methods.md, 'The policy interface')."""
from poxm_core.policy.base import Bag, Policy
from poxm_core.policy.registry import POLICIES, PolicyRequest, build_policies
from poxm_core.policy.stack import NetworkStack

__all__ = ["Bag", "Policy", "POLICIES", "PolicyRequest", "build_policies", "NetworkStack"]
