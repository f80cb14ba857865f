"""Moved: the output layer is `poxm_core.policy.heads`, seeds are `poxm_core.seeds`. Re-exported here
only until the training modules being split import them from there (then this module goes)."""
from poxm_core.policy.heads import HeadParams, RowAdam, RowScorer, init_head
from poxm_core.seeds import stable_seed

__all__ = ["RowScorer", "RowAdam", "HeadParams", "init_head", "stable_seed"]
