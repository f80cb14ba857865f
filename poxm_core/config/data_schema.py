"""The data part of the configuration schema (poxm_core/config/sweep_schema.py holds the rest, schema.py the loader):
synthetic presets, logging-policy variants, and datasets from the registry or declared in the config.
Also the strict base model every config class derives from."""
from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator, PrivateAttr

from poxm_core.common.errors import nearest


def _unset(v: Any) -> bool:
    """Keys added after results were published are left out of dumps (and so of every hash) while unset."""
    return v is None or v == []


class _Strict(BaseModel):
    # allow_inf_nan off: a rate, fraction or temperature of inf/nan would train to NaN minutes later
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class SyntheticConfig(_Strict):
    """Generated XMC data: power-law label frequencies, features carrying label signal."""
    preset: Literal["eurlex", "wiki10", "amazon670k"] | None = Field(None, description="Table-1 shape; explicit sizes below override it")
    n_train: int | None = Field(None, gt=0, description="training instances")
    n_test: int | None = Field(None, gt=0, description="test instances")
    n_features: int | None = Field(None, gt=0, description="D, vocabulary size")
    n_labels: int | None = Field(None, gt=1, description="L, number of labels (actions)")
    mean_labels: float | None = Field(None, gt=0, description="mean true labels per instance")
    scale: float = Field(1.0, gt=0, le=1.0, description="shrink a preset's N (not D, L) by this factor")

    @field_validator("n_train", "n_test", "n_features", "n_labels")
    @classmethod
    def _fits(cls, v: int | None, info) -> int | None:
        """A size no machine can generate is refused with the config (before Ray starts), not found by a
        prepare task that runs out of memory inside Ray."""
        if v is not None and v > MAX_SYNTHETIC_SIZE:
            what = "rows" if info.field_name in ("n_train", "n_test") else info.field_name.removeprefix("n_")
            raise ValueError(f"{v} {what} is more than poxm generates (at most {MAX_SYNTHETIC_SIZE:,}: the data is "
                             "generated in memory, e.g. rows x model.dim x 4 bytes of embeddings)")
        return v


# The largest synthetic size (rows, features, labels): 2^31 - 1, beyond any machine's memory for the
# rows (at dim 256 their embeddings alone would be 2 TiB) and the index range of the sparse matrices.
MAX_SYNTHETIC_SIZE = 2**31 - 1


# Statistics a variant may be matched to instead of declaring T (`match`, docs/data.md, "Variants
# matched to a logging quality"; solved by poxm_core.prepare.match on training rows only).
MATCH_STATISTICS = ("logging_to_skyline_R@5",)


def match_problem(T_given: bool, match: Any) -> tuple[str, str] | None:
    """(key, what is wrong) of a variant's `match` entry, or None when it is well formed: one known
    statistic with a target ratio in (0, 1], and no `T` beside it (the solved T takes its place). The
    config loader (checks.py, with the dataset's name and the YAML line) and VariantConfig both ask."""
    if match is None:
        return None
    if T_given:
        return "T", "give either 'T' or 'match', not both (match solves for T at prepare time)"
    if not isinstance(match, dict) or len(match) != 1:
        return "match", (f"expected one statistic and its target, e.g. match: {{{MATCH_STATISTICS[0]}: 0.51}}, "
                         f"got {match!r}")
    (stat, target), = match.items()
    if stat not in MATCH_STATISTICS:
        return f"match.{stat}", f"unknown statistic '{stat}'" + nearest(str(stat), MATCH_STATISTICS)
    if isinstance(target, bool) or not isinstance(target, (int, float)) or not (0.0 < target <= 1.0):
        return f"match.{stat}", f"the target ratio must be a number in (0, 1], got {target!r}"
    return None


class VariantConfig(_Strict):
    """A logging-policy variant (paper appendix, Table logging_param): (alpha, beta, T), or (alpha, beta)
    and `match`, a target logging quality from which prepare solves T (docs/data.md)."""
    name: str = Field(description="variant label, e.g. A")
    alpha: float = Field(description="fraction of training instances the logging model sees")
    beta: float = Field(0.0, description="Gumbel noise scale on log p_hat")
    # None only with `match` (and then left out of the dump): a variant without `match` has a T, 1 by
    # default, dumped as always, so the hash of every config written before `match` existed is unchanged
    T: float | None = Field(None, exclude_if=lambda v: v is None, description="softmax temperature (default 1); leave out with `match`")
    match: dict[str, float] | None = Field(
        None, exclude_if=_unset,
        description="instead of T: {statistic: target}; logging_to_skyline_R@5 = rho's expected R@5 over a supervised "
                    "reference's greedy P@5, both on held-out training rows; prepare solves T to reach the target")
    selector: Literal["logging", "reward"] | None = Field(
        None, exclude_if=_unset,
        description="a logged dataset's variant only: how C(x) (the action set) is ordered, hence Phi^p = its first p: "
                    "'logging' (default) by the log's position marginals, ties by smaller action id (a uniform log: "
                    "the p smallest ids); 'reward' ties by a reward model's rhat(a, position) fitted on the fit rows")

    @model_validator(mode="before")
    @classmethod
    def _default_T(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("match") is None and data.get("T") is None:
            data = {**data, "T": 1.0}
        return data

    @field_validator("alpha")
    @classmethod
    def _alpha(cls, v: float) -> float:
        if not (0.0 < v <= 1.0) or math.isnan(v):
            raise ValueError(f"alpha must be in (0, 1], got {v}")
        return v

    @field_validator("beta")
    @classmethod
    def _beta(cls, v: float) -> float:
        if not (v >= 0.0) or math.isinf(v):
            raise ValueError(f"beta must be a finite number >= 0, got {v}")
        return v

    @field_validator("T")
    @classmethod
    def _temp(cls, v: float | None) -> float | None:
        if v is not None and (not (v > 0.0) or math.isinf(v)):
            raise ValueError(f"T must be a finite number > 0, got {v}")
        return v

    @model_validator(mode="after")
    def _match(self) -> "VariantConfig":
        bad = match_problem(self.T is not None and self.match is not None, self.match)
        if bad is not None:
            raise ValueError(f"variant '{self.name}': key '{bad[0]}': {bad[1]}")
        return self

    @property
    def matched(self) -> bool:
        """Whether T is solved at prepare time (`match`) rather than declared."""
        return self.match is not None


class LoggedColumnsConfig(_Strict):
    """The column map of a logged table (source: table): which column holds what (docs/data.md, "Logged feedback")."""
    action: str = Field("action", description="integer action id in [0, n_actions)")
    position: str = Field("position", description="slot in the slate, counted from position_base")
    reward: str = Field("reward", description="the reward (0/1: a click)")
    propensity: str = Field("propensity", description="the logging policy's probability of that action at that position, in (0, 1]")
    context: list[str] = Field([], description="numeric context columns (used as they are)")
    categorical: list[str] = Field([], description="categorical context columns (one feature per value)")
    position_base: Literal[0, 1] = Field(1, description="the value of the first slot")
    slate_size: int | None = Field(None, gt=0, description="slots per slate; default: the largest position seen")
    n_actions: int | None = Field(None, gt=0, description="size of the action set; default: the action features' rows, else the largest id + 1")


class LoggedConfig(_Strict):
    """Real logged feedback instead of an XMC dataset (docs/data.md, "Learning from a log"): the log is cut by row
    into a fixed test part (test_fraction, split_seed) and, per run seed, a validation slice of the rest
    (the dataset's val_fraction); no logging model is trained, the logged propensities are q."""
    source: Literal["obd", "table"] = Field(description="obd: the Open Bandit Dataset (obp's archive or its folder layout); table: a CSV/Parquet file mapped by `columns`")
    path: str | None = Field(None, description="obd: the dataset's folder or archive (default <data_root>/obd); table: the log file; relative to the data root unless absolute")
    policy: Literal["random", "bts"] | None = Field(None, exclude_if=_unset, description="obd: the log learned from (default random)")
    campaign: Literal["all", "men", "women"] | None = Field(None, exclude_if=_unset, description="obd: the campaign (default all)")
    target: Literal["random", "bts"] | str | None = Field(None, exclude_if=_unset, description="another log of the same action set the learned policies are also evaluated on (split 'target'): obd: a policy (default: the other one; 'none' for none); table: a file, as `path`")
    columns: LoggedColumnsConfig | None = Field(None, exclude_if=_unset, description="table: the column map")
    action_features: str | None = Field(None, exclude_if=_unset, description="table: a CSV/Parquet table of action features (one row per action id, column `action`), which also fixes the action set")
    test_fraction: float = Field(0.25, gt=0, lt=1, description="share of the log's rows held out as the test part (off-policy estimates of the learned policies)")
    split_seed: int = Field(0, ge=0, description="seed of the row permutation that cuts the test part (fixed across run seeds)")

    @model_validator(mode="after")
    def _by_source(self) -> "LoggedConfig":
        if self.source == "obd":
            for key in ("columns", "action_features"):
                if getattr(self, key) is not None:
                    raise ValueError(f"'{key}' is for source: table (the Open Bandit Dataset's columns are known)")
            if self.target is not None and self.target not in ("random", "bts", "none"):
                raise ValueError(f"target: expected random, bts or none for source: obd, got {self.target!r}")
        else:
            for key in ("policy", "campaign"):
                if getattr(self, key) is not None:
                    raise ValueError(f"'{key}' is for source: obd")
            if self.path is None:
                raise ValueError("source: table needs 'path' (the log file)")
            if self.columns is None:
                raise ValueError("source: table needs 'columns' (the column map: action, position, reward, "
                                 "propensity, context and/or categorical)")
            if not self.columns.context and not self.columns.categorical:
                raise ValueError("columns: expected at least one context column ('context' numeric or 'categorical')")
        return self

    @property
    def obd_policy(self) -> str:
        return self.policy or "random"

    @property
    def obd_target(self) -> str | None:
        """source obd: the target log's policy (default the other one), None for none."""
        if self.target == "none":
            return None
        return self.target or ("bts" if self.obd_policy == "random" else "random")


class SplitConfig(_Strict):
    """A test split drawn by a seed (docs/data.md, "Fresh splits"): cut from a single data file (a dataset
    declared with `train` and no `test`), or with `from: union` a re-split of the dataset's own train and
    test rows pooled (a registered dataset such as bibtex, or one declared with `train` and `test`)."""
    # `from` is a Python keyword: the field is `source`, read and written as `from`
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, validate_by_name=True,
                              validate_by_alias=True, serialize_by_alias=True)
    test_fraction: float = Field(0.25, gt=0, lt=1, description="share of the rows held out as the test split")
    seed: int = Field(0, ge=0, description="seed of the row permutation")
    source: Literal["train", "union"] | None = Field(
        None, alias="from", exclude_if=_unset,
        description="the rows split: 'train' (default) the one training file's; 'union' the dataset's train and test "
                    "rows pooled, then split again")
    redraw_per_seed: bool | None = Field(
        None, exclude_if=lambda v: v is None or v is False,
        description="true: every run seed draws its own split, derived from (seed, run seed); default: one split "
                    "for every run seed")

    @property
    def union(self) -> bool:
        return self.source == "union"


DATA_FORMATS = ("xc", "split", "svmlight", "npz", "text")


class DatasetConfig(_Strict):
    """One dataset of the sweep and its logging variants: a registry dataset (by name), or one declared
    here by `format` + `train` [+ `test` | `split`] (docs/data.md, "Your own data")."""
    name: str = Field(description="registry name (bibtex, delicious, eurlex-4k, wiki10-31k, amazon-670k, synthetic, or one a plugin registers), or any name with `format`")
    _index: int | None = PrivateAttr(None)     # its place in the sweep's `datasets` list (set by SweepConfig)

    @property
    def key(self) -> str:
        """This dataset's config key in the notation of overrides and messages: `datasets.<index>`."""
        return f"datasets.{self._index}" if self._index is not None else f"datasets.{self.name}"
    path: str | None = Field(None, description="folder or file of user-supplied data; default: <data_root>/<registry folder>")
    format: Literal["xc", "split", "svmlight", "npz", "text"] | None = Field(None, exclude_if=_unset, description="a dataset declared in the config: xc (XC BoW file), split (X_Xf + X_Y files), svmlight (multilabel), npz (X and Y in one .npz, or [X.npz, Y.npz] written by scipy.sparse.save_npz), text (texts + label names)")
    folder: str | None = Field(None, exclude_if=_unset, description="a dataset declared by `format`: the folder holding its files, relative to the data root unless absolute; `train`/`test` are then names inside it")
    train: str | list[str] | None = Field(None, exclude_if=_unset, description="training file (split/text: [features or texts, labels]; npz: one file or [features, labels]); relative to the config file's folder, or to `folder`")
    test: str | list[str] | None = Field(None, exclude_if=_unset, description="test file(s), as `train`; or leave out and set `split`")
    split: SplitConfig | None = Field(None, exclude_if=_unset, description="cut the test split from `train` (when there is no test file)")
    propensity: Literal["default"] | None = Field(None, exclude_if=_unset, description="'default': accept A=0.55, B=1.5 for a dataset declared in the config (a warning is logged)")
    synthetic: SyntheticConfig | None = Field(None, description="sizes for name=synthetic")
    propensity_A: float | None = Field(None, gt=0, description="Jain et al. A; default from the registry (required for a dataset declared by `format`)")
    propensity_B: float | None = Field(None, gt=0, description="Jain et al. B; default from the registry (required for a dataset declared by `format`)")
    logged: LoggedConfig | None = Field(None, exclude_if=_unset, description="real logged feedback instead of an XMC dataset (docs/data.md, \"Learning from a log\"): the log is the logging policy")
    val_fraction: float = Field(0.1, gt=0, lt=1, description="share of training instances held out as the validation log")
    logging_propensities: Literal["recorded", "estimated"] | None = Field(
        None, exclude_if=_unset,
        description="recorded (default): the logged propensities; estimated: ignore them and use a model of the "
                    "logging policy fitted on the training log (cross-fitted; docs/estimators.md, \"Logs without "
                    "propensities\") for every importance weight of the methods and estimators")
    variants: list[VariantConfig] = Field(description="logging variants (alpha, beta, T); a logged dataset: how Phi^p orders the action set (`selector`), default [{name: log}]")

    @model_validator(mode="before")
    @classmethod
    def _logged_variants(cls, data: Any) -> Any:
        # a logged dataset's logging policy is the log: its variants take no (alpha, beta, T), only `selector`
        if isinstance(data, dict) and data.get("logged") is not None:
            vs = data.get("variants")
            if vs is None:
                vs = [{"name": "log"}]
            if isinstance(vs, list):
                vs = [{"alpha": 1.0, **v} if isinstance(v, dict) else v for v in vs]
            data = {**data, "variants": vs}
        return data

    @model_validator(mode="after")
    def _unique_variants(self) -> "DatasetConfig":
        names = [v.name for v in self.variants]
        if len(set(names)) != len(names):
            raise ValueError(f"variant names must be unique, got {names}")
        if not names:
            raise ValueError("at least one variant is needed")
        if self.logged is not None:
            for key in ("format", "synthetic", "path", "split", "propensity", "propensity_A", "propensity_B",
                        "logging_propensities"):
                if getattr(self, key) is not None:
                    raise ValueError(f"'{key}' is for an XMC dataset; a logged dataset declares its data under 'logged'")
            for v in self.variants:
                if v.alpha != 1.0 or v.beta != 0.0 or v.T != 1.0 or v.match is not None:
                    raise ValueError(f"variant '{v.name}': a logged dataset's logging policy is the log itself; its "
                                     "variants take only 'name' and 'selector' (logging | reward), not alpha/beta/T/match")
            return self
        for v in self.variants:
            if v.selector is not None:
                raise ValueError(f"variant '{v.name}': 'selector' is for a logged dataset (datasets.<i>.logged)")
        if self.format is None:
            for key in ("folder", "train", "test", "propensity"):
                if getattr(self, key) is not None:
                    raise ValueError(f"'{key}' declares a dataset by its files: set 'format' too ({', '.join(DATA_FORMATS)})")
            self._registered_split()
            return self
        if self.train is None:
            raise ValueError(f"format={self.format}: 'train' (the training file) is required")
        self._declared_split()
        pair = self.format in ("split", "text")
        for key in ("train", "test"):
            v = getattr(self, key)
            if v is None:
                continue
            two = isinstance(v, list) and len(v) == 2
            ok = (two or not isinstance(v, list)) if self.format == "npz" else (two if pair else not isinstance(v, list))
            if not ok:
                want = "a list of two files [features, labels]" if self.format == "split" else \
                       "a list of two files [texts, labels]" if pair else \
                       "one file path (X and Y in one .npz) or a list of two files [features, labels]" \
                       if self.format == "npz" else "one file path"
                raise ValueError(f"'{key}': format={self.format} expects {want}, got {v!r}")
        if self.format == "npz" and self.test is not None and isinstance(self.test, list) != isinstance(self.train, list):
            raise ValueError("format=npz: 'train' and 'test' must be alike, both one file (X and Y in one .npz) "
                             "or both a list [features, labels]")
        if self.propensity is None and (self.propensity_A is None or self.propensity_B is None):
            raise ValueError("a dataset declared by 'format' needs its label propensity parameters "
                             "propensity_A and propensity_B (Jain et al.; 0.55 and 1.5 are the usual "
                             "defaults), or propensity: default to accept those with a warning")
        return self

    def _registered_split(self) -> None:
        """A registered dataset keeps its own test split unless `split: {from: union}` re-draws it."""
        if self.split is None:
            return
        if self.synthetic is not None or self.name == "synthetic":
            raise ValueError("'split' re-splits data read from files; the synthetic dataset is generated with its "
                             "own test rows (synthetic.n_test)")
        if not self.split.union:
            raise ValueError(f"split: '{self.name}' has its own test split; to draw a new one from its train and test "
                             "rows pooled, set split.from: union (e.g. split: {from: union, test_fraction: 0.34, "
                             "seed: 2026})")

    def _declared_split(self) -> None:
        """A declared dataset: a test file, a split of the training file, or both with `from: union`."""
        eg = "e.g. split: {test_fraction: 0.25, seed: 0}"
        if self.test is None and self.split is None:
            raise ValueError(f"a dataset declared by 'format' needs 'test' (a test file) or 'split' ({eg})")
        if self.test is not None and self.split is not None and not self.split.union:
            raise ValueError("'test' and 'split' together: set split.from: union to re-split the train and test rows "
                             "pooled, or drop one of them")
        if self.test is None and self.split.union:
            raise ValueError(f"split.from: union pools 'train' with 'test', but there is no 'test' file; "
                             f"leave out 'from' to cut the test split from 'train' ({eg})")
