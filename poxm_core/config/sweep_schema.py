"""The run part of the configuration schema: the shared model, methods, training protocol, selection,
resources, MLflow, and the whole `SweepConfig` (poxm_core/config/data_schema.py holds the datasets;
poxm_core/config/schema.py the strict loader, dumps and hashes, and re-exports every class here)."""
from __future__ import annotations

from types import MappingProxyType
from typing import Any, Literal, Mapping

from pydantic import ConfigDict, Field, PrivateAttr, field_validator, model_serializer, model_validator

from poxm_core.common.errors import PoxmInputError, nearest
from poxm_core.config.data_schema import DatasetConfig, _Strict, _unset


class ModelConfig(_Strict):
    """Shared core model: sparse encoder to width `dim` + linear head; the logging model."""
    dim: int = Field(256, gt=0, description="encoder output width d")
    epochs: int = Field(20, gt=0, description="logging-model training epochs (one-vs-all); 20: see docs/artifacts.md, Measured")
    lr: float = Field(2e-3, gt=0, description="logging-model Adam learning rate")
    batch_size: int = Field(256, gt=0, description="logging-model batch size")
    weight_decay: float = Field(0.0, ge=0, description="logging-model weight decay")
    n_candidates: int = Field(100, gt=0, description="K: candidates C(x) = top-K labels of p_hat")
    topk_chunk_mb: int = Field(256, gt=0, description="memory budget of one chunk of the chunked top-k and of one logging-model micro-batch of logits (MiB)")
    slate_size: int = Field(5, gt=0, description="ell: logged slate length")


# The per-method keys that every method's entry had when results were published (one flat class then),
# at their defaults then. They are the ids of published runs: the resolved config is hashed into every
# run directory's name (docs/results/*/config.yaml, scripts/benchmark.sh), so every method's dump still
# writes them, at these values for a method without them; any other option is dumped only when given.
PUBLISHED_METHOD_KEYS: Mapping[str, Any] = MappingProxyType({"softmax": "full", "n_negatives": 1024, "support": "phi"})
_COMMON_METHOD_KEYS = ("p", "lam", "lr", "init")


class MethodConfig(_Strict):
    """Settings every method has. `p`/`lam` only for methods that use them (the registry checks). A
    method with options of its own declares a subclass as `Method.Options` (docs/methods.md); here its
    keys are kept as extras (this module is schema-only: it does not import the method registry), and
    the methods layer (`Method.options`) turns the entry into the method's class and validates it."""
    model_config = ConfigDict(extra="allow", frozen=True, allow_inf_nan=False)
    p: list[int] | None = Field(None, description="grid of action-selector sizes p")
    lam: list[float] | None = Field(None, description="grid of reward translations lambda")
    lr: float | None = Field(None, gt=0, description="learning rate; default training.lr_is (IS-based methods) or training.lr_supervised (DM, skylines)")
    init: Literal["fresh", "logging", "random"] | None = Field(None, description="how the trained layers start; default training.init ('random' = 'fresh')")

    @model_validator(mode="before")
    @classmethod
    def _published_keys_at_default(cls, data: Any) -> Any:
        # A resolved config (run_dir/config.yaml, --print-config, docs/results) writes the published
        # keys for every method: one this class lacks, at its published default, sets nothing.
        if isinstance(data, dict):
            data = {k: v for k, v in data.items()
                    if not (k in PUBLISHED_METHOD_KEYS and k not in cls.model_fields
                            and v == PUBLISHED_METHOD_KEYS[k] and not isinstance(v, bool))}
        return data

    @model_validator(mode="after")
    def _defaults_are_not_settings(self) -> "MethodConfig":
        # A key written out at its default value (as `--print-config` and run_dir/config.yaml do)
        # sets nothing: drop it from model_fields_set, which the methods registry reads to reject
        # settings a method would ignore, so a resolved config loads back as the same config.
        for key in list(self.model_fields_set):
            if key in type(self).model_fields and getattr(self, key) == type(self).model_fields[key].default:
                self.model_fields_set.discard(key)
        return self

    @model_serializer(mode="wrap")
    def _canonical(self, handler) -> dict:
        # The dump (and so config_hash, the run directory's name) of the one flat class results were
        # published with: common keys, then PUBLISHED_METHOD_KEYS (this entry's values, else the
        # published defaults), then any other option only when given (an extra) or off its default.
        d = handler(self)
        out = {k: d[k] for k in _COMMON_METHOD_KEYS if k in d}
        out.update({k: d.get(k, v) for k, v in PUBLISHED_METHOD_KEYS.items()})
        fields = type(self).model_fields
        out.update({k: v for k, v in d.items()
                    if k not in out and (k not in fields or getattr(self, k) != fields[k].default)})
        return out


class TrainingConfig(_Strict):
    """How every head is trained. The defaults ARE the paper's protocol (docs/protocol.md); any other
    value of `policy`, `init`, `translation`, `lr_is` or `lr_supervised` is a named ablation, and
    `protocol_name` says which one a run used (recorded in every result, summary and MLflow run)."""
    epochs: int = Field(20, gt=0, description="epochs for every trained head")
    batch_size: int = Field(64, gt=0, description="mini-batch size")
    policy: Literal["network", "linear"] = Field("network", description="policy architecture: 'network' = trainable layers on the frozen encoder AND the sparse input, then the output layer (the paper's trainable attention + FC); 'linear' = output layer on the frozen encoder only (ablation)")
    network_inputs: Literal["sparse", "sparse+encoder"] = Field("sparse", description="what the network policy reads: the sparse input x (paper protocol here: docs/protocol.md says why), or x and the frozen encoder's z")
    hidden: int = Field(256, gt=0, description="width of the policy network's output features (network policy)")
    init: Literal["fresh", "logging"] = Field("fresh", description="trained layers start fresh (paper) or from the logging model's head (ablation)")
    translation: Literal["loss", "reward"] = Field("loss", description="lambda translates the loss 1 - r as in BanditNet, whose grid the paper uses (paper protocol), or the reward r (ablation)")
    lr_is: float = Field(5e-3, gt=0, description="Adam rate of IS-based methods (the paper fixes 5e-5 for AttentionXML; here chosen once from validation estimates: docs/protocol.md)")
    lr_supervised: float = Field(1e-3, gt=0, description="Adam rate of DM and the skylines (paper 1e-4, x10)")
    weight_decay: float = Field(0.0, ge=0, description="Adam weight decay on the trained layers")
    mc_slates: int = Field(32, gt=0, description="Monte-Carlo slates per instance for stochastic metrics")
    eval_max_support: int = Field(1024, gt=0, description="full-L policies are evaluated on their top this many labels")
    # These keys came after results were published and change no number on CPU: left out of dumps (and
    # so of the sweep hash, the run directory's name) at their defaults.
    deterministic: Literal["auto"] | bool = Field("auto", exclude_if=lambda v: v == "auto", description="torch.use_deterministic_algorithms during a trial: true, false, or auto = on for CPU (the reference results, compared exactly by the tests), off for CUDA, where its sort-based row-update kernels cost 2-3x the step and leaving it off changes only the float summation order of atomic adds (docs/performance.md)")
    batched_heads: Literal["auto"] | bool = Field(False, exclude_if=lambda v: v is False, description="train a trial's heads as one batched step (one scoring, one loss evaluation per kind of head, one optimiser step for all their output layers) instead of one after another: true, false (default), or auto = on for CUDA, off for CPU (the reference results); only the float summation order differs (docs/training.md)")
    input_adam: Literal["dense", "lazy"] = Field("dense", exclude_if=lambda v: v == "dense", description="Adam of the network policy's sparse-input layer V (features x hidden): dense (default: every row every step), or lazy = only the rows of the features a batch holds, as the output layers are updated; at Amazon-670K's size dense Adam over V is about a third of a GPU step (docs/training.md)")
    checkpoint_every: int = Field(1, gt=0, exclude_if=lambda v: v == 1 and not isinstance(v, bool), description="write a trial checkpoint every this many epochs and after the last; a resumed trial restarts from the last one written and still ends identical (CPU)")


PAPER_PROTOCOL = {"policy": "network", "network_inputs": "sparse", "init": "fresh", "translation": "loss", "lr_is": 5e-3, "lr_supervised": 1e-3}


def protocol_name(training: "TrainingConfig") -> str:
    """'paper' when every protocol setting is the paper's, else 'paper+key=value,...' naming the ablation."""
    diff = [f"{k}={getattr(training, k)}" for k, v in PAPER_PROTOCOL.items() if getattr(training, k) != v]
    return "paper" + ("+" + ",".join(diff) if diff else "")


class SelectionConfig(_Strict):
    criterion: str = Field("IS", description="validation-log estimator that chooses (p, lambda): IS (default), SNIS (the paper's; its choices are reported beside the default's in every run), sIS, DR, PIS (prefix-product, unbiased for the deployed slate), SNIS-LB, MIPS, OffCEM (cluster weights; docs/estimators.md)")
    cross_fit: int | None = Field(
        None, ge=2, exclude_if=_unset,
        description="K: cross-fit the validation estimates that selection reads: the whole log (fit and validation "
                    "logs) cut into K seeded folds, every head trained K more times (copy k on all folds but k, "
                    "estimated on fold k), the estimate the mean of the K; costs K more trainings a trial "
                    "(docs/protocol.md, section 6). Unset: the held-out validation log alone")
    clusters: int | None = Field(
        None, ge=1, exclude_if=_unset,
        description="k of the label clusters MIPS and OffCEM marginalise over in every validation estimate (k-means "
                    "of the logging model's label rows, seed 0; docs/estimators.md): at most the dataset's L. Unset: "
                    "32, or L where a dataset has fewer labels")


class ClaimEntryConfig(_Strict):
    """One claim of the declared family (its key is checked against the report's claim registry when the
    sweep is planned, docs/report.md "The declared family")."""
    claim: str = Field(description="a claim key: poxm_vs_logging, poxm_vs_dm, ..., ranking_<method>, p_grows")
    datasets: list[str] | None = Field(None, exclude_if=_unset, description="the datasets it covers (default: every one)")
    variants: list[str] | None = Field(None, exclude_if=_unset, description="the variants it covers (default: every one)")
    test: Literal["crossed_t", "sign"] | None = Field(None, exclude_if=_unset, description="the test its verdict uses: crossed_t (default: t on seeds + test instances) or sign (exact sign test over seeds; p_grows' default)")


class ClaimsConfig(_Strict):
    """The claims the run declares before it starts: verdicts are Holm over this whole family at once;
    every other row of the claims table is exploratory. Unset: the default family (every claim, every
    dataset x variant), written into the run's config.yaml when it starts."""
    criterion: str | None = Field(None, exclude_if=_unset, description="the selection criterion whose choices the verdicts test (default: selection.criterion)")
    alpha: float = Field(0.05, gt=0, lt=1, description="family-wise level")
    family: list[ClaimEntryConfig] | None = Field(None, exclude_if=_unset, description="the declared claims (default: every registered claim)")


class ResourcesConfig(_Strict):
    cpus_per_trial: float = Field(1, gt=0, description="CPUs per Train worker")
    gpus_per_trial: float = Field(0, ge=0, description="GPUs per Train worker (fractions share a card)")
    num_workers: int = Field(1, gt=0, description="Ray Train workers per trial: 1 (no data parallelism, docs/orchestration.md)")
    max_concurrent_trials: int | None = Field(None, gt=0, description="default: what the resources allow")
    max_failures: int = Field(2, ge=0, description="retries of a crashed trial (from its checkpoint)")
    trials_per_job: int | Literal["auto"] | None = Field(
        None, exclude_if=_unset,
        description="trials run one after another by one Ray Train job (its start-up paid once): 1 = one job per "
                    "trial; default (unset or 'auto'): about 2 jobs per slot (trials that fit at once), 1 when every "
                    "trial is of one dataset with the same heads")
    executor: Literal["train", "tune"] | None = Field(
        None, exclude_if=_unset,
        description="where a job's trials run: 'tune' (default: measured faster on a GPU) in Ray Tune's trial "
                    "process itself, which then holds the trial's CPUs and GPU (no Ray Train controller or worker "
                    "group to start a job; Tune's retries instead of Ray Train's); 'train' in the one worker of a Ray "
                    "Train job (docs/orchestration.md)")
    mps: bool | None = Field(
        None, exclude_if=_unset,
        description="true: trials sharing a GPU run under NVIDIA's Multi-Process Service (a local sweep starts its "
                    "daemon if none runs, and stops it at the end); their small kernels then run side by side instead "
                    "of taking turns. Default off")
    storage_path: str | None = Field(None, exclude_if=_unset, description="where trials exchange prepared data, checkpoints and results: a path or pyarrow filesystem URI every node reaches (default: the run directory, i.e. one node or a shared filesystem)")

    @field_validator("trials_per_job", mode="before")
    @classmethod
    def _pack(cls, v):
        if isinstance(v, bool) or (isinstance(v, int) and v < 1):
            raise ValueError(f"trials_per_job={v!r}: expected a whole number >= 1 or 'auto'")
        return None if v == "auto" else v

    @field_validator("num_workers")
    @classmethod
    def _one_worker(cls, v: int) -> int:
        # Data parallelism inside a trial is not worth it here (docs/orchestration.md, "Why no data
        # parallelism"): scale with more trials at once, or more heads per trial.
        if v != 1:
            raise ValueError(f"num_workers={v}: a trial runs on one worker (no data parallelism); use "
                             "resources.max_concurrent_trials / gpus_per_trial to run more trials at once, or group_by: seed")
        return v


class MlflowConfig(_Strict):
    enabled: bool = Field(True, description="false: no MLflow tracking (a machine without mlflow, e.g. a GPU smoke test)")
    tracking_uri: str | None = Field(None, description="default: sqlite store inside the run directory")
    experiment: str | None = Field(None, description="default: the sweep name")


class SweepConfig(_Strict):
    """A whole benchmark sweep. `poxm prepare` and `poxm train` read the same file."""
    name: str = Field(description="sweep name; the run directory is <runs_dir>/<name>-<hash>")
    # where each key came from (file:line or the override), kept by load_config for checks made later
    # (a method's own options are checked by its registry entry, which this module does not import)
    _where: object = PrivateAttr(None)

    def located(self, exc: PoxmInputError) -> PoxmInputError:
        """`exc` ('methods.dm.temperature: ...') prefixed with where that key was given, when known."""
        msg = str(exc)
        key = msg.split(":", 1)[0]
        if self._where is None or " " in key or "." not in key:
            return exc
        return PoxmInputError(f"{self._where(tuple(key.split('.')), given=True)}: {msg}")
    seeds: list[int] = Field([0], description="seeds: logging model, variants' noise, slates, heads")
    data_root: str | None = Field(None, description="where registry datasets live; default $POXM_DATA_ROOT or ../shared/data")
    runs_dir: str = Field("runs", description="where run directories are created")
    device: Literal["cpu", "cuda", "auto"] = Field("cpu", description="torch device")
    plugin_path: list[str] = Field([], exclude_if=_unset, description="folders put on sys.path before `plugins` are imported; relative to the config file's folder (default: that folder)")
    plugins: list[str] = Field([], exclude_if=_unset, description="modules imported on the driver and in every Ray worker before anything else: they may register datasets, methods, estimators")
    datasets: list[DatasetConfig]
    model: ModelConfig = ModelConfig()
    # each entry: the keys of MethodConfig plus the method's own options (validated by the methods layer)
    methods: dict[str, MethodConfig] = Field(description="method registry name -> settings (the keys of MethodConfig, plus the method's own options: docs/methods.md)")
    training: TrainingConfig = TrainingConfig()
    selection: SelectionConfig = SelectionConfig()
    resources: ResourcesConfig = ResourcesConfig()
    group_by: Literal["method", "seed"] = Field("method", description="one trial per (dataset, variant, seed, method) or per (dataset, variant, seed) with all methods")
    mlflow: MlflowConfig = MlflowConfig()
    claims: ClaimsConfig | None = Field(None, exclude_if=_unset, description="the declared family of claims (docs/report.md); not part of the run's identity")

    @field_validator("seeds")
    @classmethod
    def _seed_range(cls, v: list[int]) -> list[int]:
        bad = [s for s in v if not 0 <= s < 2**31]   # NumPy/torch generators take 0 <= seed < 2^32
        if bad:
            raise ValueError(f"seeds must be integers in [0, 2^31), got {bad[0]}")
        return v

    @field_validator("name")
    @classmethod
    def _name_length(cls, v: str) -> str:
        if len(v) > 100:   # it names a folder (with '-<hash>'), and file systems stop at 255 bytes
            raise ValueError(f"must be at most 100 characters, got {len(v)}")
        return v

    @field_validator("plugins")
    @classmethod
    def _import_plugins(cls, v: list[str], info) -> list[str]:
        import_plugins(v, (info.data or {}).get("plugin_path", []))
        return v

    @model_validator(mode="after")
    def _unique(self) -> "SweepConfig":
        for i, d in enumerate(self.datasets):
            d._index = i                  # messages name a dataset's keys as datasets.<i>.<key>
        names = [d.name for d in self.datasets]
        if len(set(names)) != len(names):
            raise ValueError(f"dataset names must be unique, got {names}")
        if len(set(self.seeds)) != len(self.seeds) or not self.seeds:
            raise ValueError(f"seeds must be a non-empty list of distinct ints, got {self.seeds}")
        kinds = {d.logged is not None for d in self.datasets}
        if len(kinds) > 1:   # their reports differ (test metrics on labels vs off-policy estimates on a held-out log)
            raise ValueError("datasets: a sweep holds either logged datasets (datasets.<i>.logged) or XMC datasets, "
                             "not both; run them as two sweeps")
        return self

    def dataset(self, name: str) -> DatasetConfig:
        for d in self.datasets:
            if d.name == name:
                return d
        raise PoxmInputError(f"unknown dataset '{name}' in this config" + nearest(name, [d.name for d in self.datasets]))


def import_plugins(modules: list[str], paths: list[str] = ()) -> None:
    """Put `paths` on sys.path and import `modules` (idempotent). Every SweepConfig validation runs it, so
    the driver, `poxm resume/report` and each Ray worker (which validates the config it is handed) load
    the same plugins before any registry lookup."""
    import importlib
    import sys

    for p in paths:
        if p not in sys.path:
            sys.path.insert(0, p)
    for m in modules:
        if m in sys.modules:
            continue
        try:
            importlib.import_module(m)
        except Exception as exc:  # noqa: BLE001  one line naming the module
            raise ValueError(f"cannot import plugin '{m}' ({type(exc).__name__}: {exc}); "
                             f"searched plugin_path {list(paths)} and sys.path") from None
