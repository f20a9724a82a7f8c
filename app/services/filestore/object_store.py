"""Where datasets and prediction results live: a local directory or an S3-compatible bucket.

``SODM_STORAGE_URL`` selects the store. Unset, it is ``SODM_DATA_DIR`` on this host's disk
(the quick start, unchanged). ``s3://bucket/prefix`` is a bucket through pyarrow's S3
filesystem: credentials and region come from the usual AWS variables (or an instance role),
and the URL's query takes pyarrow's options, e.g. ``?endpoint_override=minio:9000&scheme=http``
for MinIO or any S3-compatible server (``AWS_ENDPOINT_URL`` works too).

Keys derive from ids only (``datasets/{id}/data.parquet``, ``predictions/{job id}.parquet``).
An object is written whole under its final key (S3 has no rename); what makes it visible is
its row in Postgres (a dataset ``ready``, a prediction job SUCCEEDED), so a reader never
sees a half-written one. ``Location`` is a key in a store; the dataset and prediction code
reads and writes through it, never through a host path.
"""

from __future__ import annotations

import contextlib
import posixpath
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from app.core.config import get_settings


@dataclass(frozen=True)
class StoredObject:
    """One object under a prefix: its key relative to the prefix, size and age."""

    key: str
    size: int
    mtime: datetime | None


@dataclass(frozen=True)
class Store:
    """A pyarrow filesystem and the root under which every key lives."""

    fs: pafs.FileSystem
    root: str
    url: str  # how another process (a Spark executor) reopens it; never holds a secret

    @property
    def is_local(self) -> bool:
        return isinstance(self.fs, pafs.LocalFileSystem)

    def at(self, key: str) -> Location:
        return Location(self, key.strip("/"))


@dataclass(frozen=True)
class Location:
    """A key in a store (an object, or a prefix of objects: a dataset's directory)."""

    store: Store
    key: str

    def __truediv__(self, name: str) -> Location:
        return Location(self.store, posixpath.join(self.key, name))

    @property
    def path(self) -> str:
        """The path the store's filesystem knows this key by."""
        return posixpath.join(self.store.root, self.key) if self.key else self.store.root

    @property
    def uri(self) -> str:
        """What another process opens with ``pyarrow.fs.FileSystem.from_uri`` (a local
        path, or ``s3://bucket/prefix/key?options``)."""
        if self.store.is_local:
            return self.path
        base = urlsplit(self.store.url)
        query = f"?{base.query}" if base.query else ""
        return f"{base.scheme}://{self.path}{query}"

    @property
    def local_path(self) -> Path | None:
        """The host path of a local store's key (None for a bucket)."""
        return Path(self.path) if self.store.is_local else None

    @property
    def fs(self) -> pafs.FileSystem:
        return self.store.fs

    def exists(self) -> bool:
        return self.fs.get_file_info(self.path).type != pafs.FileType.NotFound

    def size(self) -> int:
        return int(self.fs.get_file_info(self.path).size or 0)

    def open_input(self) -> Any:
        """A random-access file (Parquet reads seek into it)."""
        return self.fs.open_input_file(self.path)

    @contextlib.contextmanager
    def open_output(self) -> Iterator[IO[bytes]]:
        """A stream that writes the object whole; on an error the partial object is
        removed."""
        if self.store.is_local:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        stream = self.fs.open_output_stream(self.path)
        try:
            yield stream
            stream.close()
        except BaseException:
            with contextlib.suppress(Exception):
                stream.close()
            self.delete()
            raise

    def read_bytes(self) -> bytes:
        with self.fs.open_input_stream(self.path) as fh:
            return fh.read()

    def write_bytes(self, data: bytes) -> None:
        with self.open_output() as fh:
            fh.write(data)

    def upload(self, source: Path) -> None:
        """Copy a local file to this key (streamed; multipart on S3)."""
        if self.store.is_local:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        pafs.copy_files(str(source), self.path, source_filesystem=pafs.LocalFileSystem(),
                        destination_filesystem=self.fs)

    def delete(self) -> None:
        """Remove the object, or every object under the prefix; absent is fine."""
        info = self.fs.get_file_info(self.path)
        if info.type == pafs.FileType.Directory:
            self.fs.delete_dir(self.path)
        elif info.type == pafs.FileType.File:
            self.fs.delete_file(self.path)

    def children(self) -> list[StoredObject]:
        """The objects under this prefix (recursively), keys relative to it."""
        selector = pafs.FileSelector(self.path, allow_not_found=True, recursive=True)
        out = []
        for info in self.fs.get_file_info(selector):
            if info.type == pafs.FileType.File:
                out.append(StoredObject(posixpath.relpath(info.path, self.path),
                                        int(info.size or 0), info.mtime))
        return out


@lru_cache(maxsize=8)
def open_store(url: str | None, data_dir: Path) -> Store:
    """The store a ``SODM_STORAGE_URL`` names (unset or empty: ``data_dir`` on this host)."""
    if not url:
        root = data_dir.resolve()
        root.mkdir(parents=True, exist_ok=True)
        return Store(pafs.LocalFileSystem(), root.as_posix(), root.as_posix())
    parts = urlsplit(url)
    if parts.scheme != "s3" or not parts.netloc:
        raise ValueError(f"SODM_STORAGE_URL must be s3://bucket[/prefix], not {url!r}")
    if parts.username or parts.password:
        raise ValueError("SODM_STORAGE_URL must not hold credentials: use the AWS variables")
    fs, root = pafs.FileSystem.from_uri(url)
    return Store(fs, root.rstrip("/"), url)


def get_store() -> Store:
    """The store the current settings name (one per distinct setting, kept)."""
    s = get_settings()
    return open_store(s.storage_url or None, Path(s.data_dir))


class StoreError(RuntimeError):
    """The configured store cannot be used (a bad URL, a missing bucket)."""


def ensure(store: Store) -> None:
    """Make sure the store can be written: its bucket exists (created when the URL says
    ``allow_bucket_creation=true``; ``sodm migrate`` and ``sodm run`` call this)."""
    if store.is_local:
        Path(store.root).mkdir(parents=True, exist_ok=True)
        return
    bucket = store.root.split("/", 1)[0]
    if store.fs.get_file_info(bucket).type != pafs.FileType.NotFound:
        return
    try:
        store.fs.create_dir(bucket)
    except OSError as exc:
        raise StoreError(f"the bucket {bucket!r} of SODM_STORAGE_URL does not exist and "
                           f"could not be created ({exc}); create it, or add "
                           "allow_bucket_creation=true to the URL") from exc


_HOST = Store(pafs.LocalFileSystem(), "/", "/")


def local_location(path: Path) -> Location:
    """A directory or file of this host as a location (scripts, tests, scratch files)."""
    return _HOST.at(path.resolve().as_posix())


def location_of(uri: str) -> Location:
    """The location of a ``Location.uri`` (another process reopening a key)."""
    if "://" not in uri:
        return local_location(Path(uri))
    fs, path = pafs.FileSystem.from_uri(uri)
    return Store(fs, "", uri).at(path)
