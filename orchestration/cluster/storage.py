"""Where the nodes of a sweep exchange files when they share no filesystem (`resources.storage_path`).

Unset (the default), the run directory is the storage: trials read the prepare cache and write their
files under it, which needs one node or a filesystem every node mounts. Set to a path or a pyarrow
filesystem URI (s3://..., gs://..., hdfs://..., file:///...), every exchange goes through
`<storage_path>/<sweep id>/`:

    ray/                     Ray Tune / Ray Train storage_path (checkpoints: Ray uploads and downloads them)
    cache/<level>/<hash>/    prepared levels, uploaded by the prepare task that built them, fetched
                             by a trial into its node's own cache (checked against content_sha256)
    trials/<trial>/          the trial's result files (rows.csv, summary.json, timing.json, done.json),
                             copied into the driver's run directory when the trial ends

and a worker never opens a path of the driver's run directory. Each node keeps its copies under
$POXM_NODE_DIR (default <tmp>/poxm-node-<uid>): cache/ (content-addressed, shared by sweeps) and
trials/<sweep id>/<trial>/ (a trial's working directory).
"""
from __future__ import annotations

import functools
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from poxm_core.common.atomic import atomic_file, publish
from poxm_core.common.errors import PoxmInputError

NODE_DIR_ENV = "POXM_NODE_DIR"


def node_dir() -> Path:
    """This node's own working folder for storage mode (never a path of the driver's run directory)."""
    d = os.environ.get(NODE_DIR_ENV) or os.path.join(tempfile.gettempdir(), f"poxm-node-{os.getuid()}")
    return Path(d)


@dataclass(frozen=True)
class Storage:
    """The sweep's folder `uri` on a pyarrow filesystem; paths below it are relative, '/'-separated."""
    uri: str

    def _fs(self):
        return _filesystem(self.uri)

    def path(self, rel: str) -> str:
        return f"{self.uri.rstrip('/')}/{rel}" if rel else self.uri

    @property
    def ray(self) -> str:
        return self.path("ray")

    def exists(self, rel: str) -> bool:
        import pyarrow.fs as pafs
        fs, base = self._fs()
        return fs.get_file_info(f"{base}/{rel}").type != pafs.FileType.NotFound

    def read_bytes(self, rel: str) -> bytes | None:
        fs, base = self._fs()
        try:
            with fs.open_input_stream(f"{base}/{rel}") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def write_bytes(self, rel: str, data: bytes) -> None:
        fs, base = self._fs()
        parent = f"{base}/{rel}".rsplit("/", 1)[0]
        fs.create_dir(parent, recursive=True)
        tmp = f"{parent}/.{rel.rsplit('/', 1)[-1]}.tmp-{os.getpid()}"
        with fs.open_output_stream(tmp) as f:
            f.write(data)
        fs.move(tmp, f"{base}/{rel}")     # a rename on file systems that have one; object stores write whole objects

    def read_json(self, rel: str, default=None):
        b = self.read_bytes(rel)
        return default if b is None else json.loads(b)

    def write_json(self, rel: str, obj) -> None:
        self.write_bytes(rel, (json.dumps(obj, indent=1, default=str) + "\n").encode())

    def put_files(self, local: Path, rel: str, skip: tuple[str, ...] = (), last: tuple[str, ...] = ()) -> None:
        """Upload the files directly inside `local` (not its subfolders) to `rel/`; the names in
        `last` after all others (a reader takes their presence as 'complete')."""
        files = sorted(p for p in Path(local).iterdir() if p.is_file() and p.name not in skip
                       and not p.name.startswith("."))
        for p in sorted(files, key=lambda q: q.name in last):
            self.write_bytes(f"{rel}/{p.name}", p.read_bytes())

    def get_files(self, rel: str, local: Path, last: tuple[str, ...] = ()) -> list[str]:
        """Download the files directly inside `rel/` into `local` (each one published atomically; the
        names in `last` after all others). Returns the names copied."""
        import pyarrow.fs as pafs
        fs, base = self._fs()
        infos = fs.get_file_info(pafs.FileSelector(f"{base}/{rel}", allow_not_found=True))
        names = sorted(i.base_name for i in infos if i.type == pafs.FileType.File and not i.base_name.startswith("."))
        for n in sorted(names, key=lambda n: n in last):
            with atomic_file(Path(local) / n) as tmp:
                tmp.write_bytes(self.read_bytes(f"{rel}/{n}"))
        return names

    # --- the prepare cache
    def put_level(self, cache_dir: Path, rel: str) -> None:
        """Upload a complete cache level `rel` (e.g. 'variant/<hash>'); its manifest goes last, so a
        level whose manifest is in storage is complete. A level already there is left alone."""
        if self.exists(f"cache/{rel}/manifest.json"):
            return
        local = Path(cache_dir) / rel
        for p in sorted(local.rglob("*")):
            if p.is_file() and p.name != "manifest.json":
                self.write_bytes(f"cache/{rel}/{p.relative_to(local).as_posix()}", p.read_bytes())
        self.write_bytes(f"cache/{rel}/manifest.json", (local / "manifest.json").read_bytes())

    def get_level(self, cache_dir: Path, rel: str) -> Path:
        """The level `rel` in this node's cache, downloaded when missing and checked against the
        manifest's content_sha256 before it is published."""
        import pyarrow.fs as pafs

        from poxm_core.prepare.cache import dir_sha256, is_complete
        final = Path(cache_dir) / rel
        if is_complete(final):
            return final
        man = self.read_json(f"cache/{rel}/manifest.json")
        if man is None:
            raise PoxmInputError(f"{self.path('cache/' + rel)}: not in storage (was it prepared in this sweep?)")
        fs, base = self._fs()
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}@fetch.{os.getpid()}-", dir=final.parent))
        try:
            for info in fs.get_file_info(pafs.FileSelector(f"{base}/cache/{rel}", recursive=True)):
                if info.type == pafs.FileType.File and info.base_name != "manifest.json":
                    sub = info.path[len(f"{base}/cache/{rel}/"):]
                    (tmp / sub).parent.mkdir(parents=True, exist_ok=True)
                    with fs.open_input_stream(info.path) as f:
                        (tmp / sub).write_bytes(f.read())
            got = dir_sha256(tmp)
            if man.get("content_sha256") and got != man["content_sha256"]:
                raise PoxmInputError(f"{self.path('cache/' + rel)}: content does not match its manifest "
                                     f"(sha256 {got[:12]} vs {man['content_sha256'][:12]}); prepare it again")
            (tmp / "manifest.json").write_text(json.dumps(man, indent=2, sort_keys=True))
            try:
                publish(tmp, final)
            except OSError:
                if not is_complete(final):   # another trial on this node won the race: fine
                    raise
                shutil.rmtree(tmp, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return final


@functools.lru_cache(maxsize=8)
def _filesystem(uri: str):
    """(pyarrow filesystem, base path) of a URI, resolved once per process (credentials, endpoints)."""
    import pyarrow.fs as pafs
    try:
        return pafs.FileSystem.from_uri(uri)
    except (ValueError, OSError) as exc:      # pyarrow's ArrowInvalid is a ValueError
        raise PoxmInputError(f"config key 'resources.storage_path': {uri}: not a usable filesystem ({exc})") from None


def sweep_storage(storage_path: str | None, sweep_id: str) -> Storage | None:
    """The sweep's Storage under `resources.storage_path`, or None (the run directory is the storage)."""
    if not storage_path:
        return None
    if "://" not in storage_path:
        storage_path = str(Path(storage_path).expanduser().resolve())
    return Storage(f"{storage_path.rstrip('/')}/{sweep_id}")
