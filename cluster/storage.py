"""One storage API for local paths, ``file://`` URIs and ``s3://bucket/prefix``, on pyarrow.fs.

>>> import tempfile
>>> root = Storage.from_uri(tempfile.mkdtemp())
>>> root.write_bytes("run/prepare/summary.json", b"{}")
>>> root.read_bytes("run/prepare/summary.json")
b'{}'
>>> root.glob("run/**/*.json")
['run/prepare/summary.json']

Writes are atomic: a reader sees the old file or the whole new one, never half of one (local:
a temporary file in the same folder, then a rename; S3: one PUT or multipart upload, which S3
makes visible only once complete). ``s3://`` honours ``AWS_ENDPOINT_URL`` (for example a
``moto_server`` or MinIO on loopback), ``AWS_REGION``/``AWS_DEFAULT_REGION`` and the usual AWS
credential variables; credentials are never part of a URI we log.
"""

from __future__ import annotations

import contextlib
import io
import os
import posixpath
import re
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO
from urllib.parse import urlparse

import pyarrow.fs as pafs

from cluster.errors import StorageError

SUPPORTED_SCHEMES = ("local paths", "file://", "s3://")


_BUCKET_REGIONS: dict[tuple[str, str], str] = {}


def endpoint_url() -> str | None:
    """The custom S3 endpoint of this environment (``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL``:
    a ``moto_server``, MinIO), with its scheme; None for AWS itself.

    >>> os.environ["AWS_ENDPOINT_URL"] = "127.0.0.1:5000"; endpoint_url()
    'http://127.0.0.1:5000'
    >>> del os.environ["AWS_ENDPOINT_URL"]; endpoint_url() is None
    True
    """
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if not endpoint:
        return None
    parsed = urlparse(endpoint if "://" in endpoint else f"http://{endpoint}")
    return f"{parsed.scheme or 'http'}://{parsed.netloc}"


def _endpoint_region(endpoint: str, bucket: str) -> str:
    """The region a custom endpoint reports for ``bucket`` (the ``x-amz-bucket-region`` header of
    a HEAD on the bucket, as AWS answers it, on an error answer too)."""
    request = urllib.request.Request(f"{endpoint}/{bucket}", method="HEAD")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            region = response.headers.get("x-amz-bucket-region")
    except urllib.error.HTTPError as error:
        region = error.headers.get("x-amz-bucket-region")
    if not region:
        raise LookupError(f"{endpoint}/{bucket}: no x-amz-bucket-region header")
    return str(region)


def bucket_region(bucket: str) -> str:
    """The region to reach ``bucket`` in: ``AWS_REGION`` or ``AWS_DEFAULT_REGION`` when set, else
    the bucket's own region as its endpoint reports it (AWS, or the custom endpoint of
    :func:`endpoint_url`; asked once per bucket and process), else ``us-east-1`` (unreachable:
    the request that follows says why). A bucket in us-west-2 read through a us-east-1 client
    fails, so the region is never guessed while it can be known.

    >>> os.environ["AWS_REGION"] = "eu-west-1"; bucket_region("chess-runs")
    'eu-west-1'
    >>> del os.environ["AWS_REGION"]
    """
    named = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if named:
        return named
    endpoint = endpoint_url()
    key = (endpoint or "", bucket)
    if key not in _BUCKET_REGIONS:
        try:
            _BUCKET_REGIONS[key] = (
                _endpoint_region(endpoint, bucket) if endpoint else pafs.resolve_s3_region(bucket)
            )
        except Exception:  # offline, no such bucket, no permission: the default, and the real error later
            _BUCKET_REGIONS[key] = "us-east-1"
    return _BUCKET_REGIONS[key]


def s3_filesystem(bucket: str | None = None) -> pafs.S3FileSystem:
    """An S3 filesystem for the AWS environment: AWS or the custom endpoint of
    :func:`endpoint_url`, in ``bucket``'s region (:func:`bucket_region`; ``us-east-1`` without a
    bucket or a named region)."""
    endpoint = endpoint_url()
    named = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    kwargs: dict[str, object] = {
        "region": named or ("us-east-1" if bucket is None else bucket_region(bucket))
    }
    if endpoint:
        scheme, netloc = endpoint.split("://", 1)
        kwargs["endpoint_override"] = netloc
        kwargs["scheme"] = scheme
    return pafs.S3FileSystem(**kwargs)  # type: ignore[arg-type]


def parse_uri(uri: str) -> tuple[pafs.FileSystem, str, str]:
    """``uri`` -> ``(filesystem, path inside it, canonical URI prefix)``.

    >>> fs, path, scheme = parse_uri("s3://chess-runs/demo")
    >>> (path, scheme)
    ('chess-runs/demo', 's3://')
    """
    if not isinstance(uri, str) or not uri.strip():
        raise StorageError(f"empty storage path or URI: {uri!r}")
    uri = uri.strip()
    match = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*)://", uri)
    if match is None:
        return pafs.LocalFileSystem(), str(Path(uri).expanduser().resolve()), ""
    scheme = match.group(1).lower()
    rest = uri[match.end() :]
    if scheme == "file":
        if not rest.startswith("/"):
            raise StorageError(f"file:// URIs need an absolute path (file:///data/games.pgn), got {uri!r}")
        return pafs.LocalFileSystem(), str(Path(rest).resolve()), ""
    if scheme in ("s3", "s3a"):
        bucket = rest.split("/", 1)[0]
        if not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", bucket):
            raise StorageError(
                f"invalid S3 bucket name {bucket!r} in {uri!r}: 3-63 lowercase letters, digits, '.' or '-'"
            )
        return s3_filesystem(bucket), rest.rstrip("/"), "s3://"
    raise StorageError(
        f"unsupported URI scheme {scheme!r} in {uri!r}; allowed: {', '.join(SUPPORTED_SCHEMES)}"
    )


@dataclass(frozen=True)
class Storage:
    """A folder on some filesystem; every method takes paths relative to it (``a/b.parquet``)."""

    fs: pafs.FileSystem
    root: str
    scheme: str = ""

    @classmethod
    def from_uri(cls, uri: str) -> Storage:
        fs, root, scheme = parse_uri(uri)
        return cls(fs=fs, root=root, scheme=scheme)

    # -- naming ---------------------------------------------------------------------------------
    @property
    def uri(self) -> str:
        """The root as a URI (``s3://bucket/prefix`` or an absolute local path)."""
        return f"{self.scheme}{self.root}"

    @property
    def is_local(self) -> bool:
        return isinstance(self.fs, pafs.LocalFileSystem)

    def path(self, rel: str = "") -> str:
        """The path inside ``fs`` of ``rel`` (what pyarrow and Ray Data want with ``filesystem=``)."""
        rel = rel.strip("/")
        if rel and (rel.startswith("..") or "/../" in f"/{rel}/"):
            raise StorageError(f"path escapes its storage root: {rel!r}")
        return posixpath.join(self.root, rel) if rel else self.root

    def uri_of(self, rel: str = "") -> str:
        return f"{self.scheme}{self.path(rel)}"

    def child(self, rel: str) -> Storage:
        """The storage rooted at ``rel`` (``Storage.from_uri('./runs').child('demo/prepare')``)."""
        return Storage(fs=self.fs, root=self.path(rel), scheme=self.scheme)

    # -- reading --------------------------------------------------------------------------------
    def info(self, rel: str = "") -> pafs.FileInfo:
        try:
            return self.fs.get_file_info(self.path(rel))
        except OSError as exc:
            raise StorageError(f"cannot reach {self.uri_of(rel)}: {_short(exc)}") from None

    def exists(self, rel: str = "") -> bool:
        return self.info(rel).type != pafs.FileType.NotFound

    def is_dir(self, rel: str = "") -> bool:
        return self.info(rel).type == pafs.FileType.Directory

    def open_input(self, rel: str = "") -> IO[bytes]:
        """A raw byte stream (no automatic decompression)."""
        try:
            return self.fs.open_input_stream(self.path(rel), compression=None)  # type: ignore[return-value]
        except FileNotFoundError:
            raise StorageError(f"no such file: {self.uri_of(rel)}") from None
        except OSError as exc:
            raise StorageError(f"cannot open {self.uri_of(rel)}: {_short(exc)}") from None

    def read_bytes(self, rel: str) -> bytes:
        with self.open_input(rel) as stream:
            return stream.read()

    def read_text(self, rel: str) -> str:
        return self.read_bytes(rel).decode("utf-8")

    def list_files(self, rel: str = "") -> list[str]:
        """Every file below ``rel``, recursively, as paths relative to the root, sorted."""
        base = self.path(rel)
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
        except OSError as exc:
            raise StorageError(f"cannot list {self.uri_of(rel)}: {_short(exc)}") from None
        root = self.root.rstrip("/") + "/"
        out = [i.path[len(root) :] if i.path.startswith(root) else i.path for i in infos if i.is_file]
        return sorted(out)

    def glob(self, pattern: str) -> list[str]:
        """Files matching ``pattern`` (``*`` and ``?`` within one folder, ``**`` across folders)."""
        pattern = pattern.strip("/")
        parts = pattern.split("/")
        fixed = []
        for part in parts:
            if has_magic(part):
                break
            fixed.append(part)
        prefix = "/".join(fixed)
        if len(fixed) == len(parts):
            return [prefix] if self.info(prefix).type == pafs.FileType.File else []
        regex = glob_to_regex(pattern)
        return [p for p in self.list_files(prefix) if regex.fullmatch(p)]

    # -- writing --------------------------------------------------------------------------------
    def makedirs(self, rel: str = "") -> None:
        try:
            self.fs.create_dir(self.path(rel), recursive=True)
        except OSError as exc:
            raise StorageError(f"cannot create {self.uri_of(rel)}: {_short(exc)}") from None

    @contextlib.contextmanager
    def atomic_output(self, rel: str) -> Iterator[IO[bytes]]:
        """Write a file that appears whole or not at all.

        >>> import tempfile
        >>> s = Storage.from_uri(tempfile.mkdtemp())
        >>> with s.atomic_output("x/y.txt") as f:
        ...     _ = f.write(b"hello")
        >>> s.read_bytes("x/y.txt")
        b'hello'
        """
        target = self.path(rel)
        if self.is_local:
            folder = posixpath.dirname(target)
            os.makedirs(folder, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{posixpath.basename(target)}.", suffix=".tmp", dir=folder)
            try:
                with os.fdopen(fd, "wb") as handle:
                    yield handle
                    handle.flush()
                    os.fsync(handle.fileno())
                os.replace(tmp, target)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        else:
            # Spool locally, then one upload: S3 shows an object only once its upload completes,
            # and nothing is uploaded if the writer fails half-way.
            with tempfile.SpooledTemporaryFile(max_size=64 << 20) as spool:
                yield spool  # type: ignore[misc]
                spool.seek(0)
                try:
                    with self.fs.open_output_stream(target) as out:
                        while chunk := spool.read(8 << 20):
                            out.write(chunk)
                except OSError as exc:
                    raise StorageError(f"cannot write {self.uri_of(rel)}: {_short(exc)}") from None

    def write_bytes(self, rel: str, data: bytes) -> None:
        with self.atomic_output(rel) as handle:
            handle.write(data)

    def write_text(self, rel: str, text: str) -> None:
        self.write_bytes(rel, text.encode("utf-8"))

    def delete(self, rel: str) -> None:
        """Delete a file or a folder (recursively); a missing one is fine."""
        info = self.info(rel)
        try:
            if info.type == pafs.FileType.Directory:
                self.fs.delete_dir(self.path(rel))
            elif info.type == pafs.FileType.File:
                self.fs.delete_file(self.path(rel))
        except OSError as exc:
            raise StorageError(f"cannot delete {self.uri_of(rel)}: {_short(exc)}") from None

    def upload_file(self, local_path: str | os.PathLike[str], rel: str) -> None:
        """Copy a local file into this storage, atomically."""
        with open(local_path, "rb") as src, self.atomic_output(rel) as dst:
            while chunk := src.read(8 << 20):
                dst.write(chunk)


def has_magic(part: str) -> bool:
    return any(ch in part for ch in "*?[")


def glob_to_regex(pattern: str) -> re.Pattern[str]:
    """``a/**/b*.pgn`` -> a regex over ``/``-separated paths.

    >>> bool(glob_to_regex("a/**/*.pgn").fullmatch("a/x/y/z.pgn"))
    True
    >>> bool(glob_to_regex("a/*.pgn").fullmatch("a/x/z.pgn"))
    False
    """
    out = io.StringIO()
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.write("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.write(".*")
            i += 2
        elif pattern[i] == "*":
            out.write("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.write("[^/]")
            i += 1
        elif pattern[i] == "[":
            end = pattern.find("]", i + 1)
            if end == -1:
                out.write(re.escape("["))
                i += 1
            else:
                body = pattern[i + 1 : end].replace("\\", "\\\\")
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.write(f"[{body}]")
                i = end + 1
        else:
            out.write(re.escape(pattern[i]))
            i += 1
    return re.compile(out.getvalue())


def split_uri(uri: str) -> tuple[Storage, str]:
    """Split a file URI into ``(storage of its folder, file name)``; used for single inputs."""
    fs, path, scheme = parse_uri(uri)
    folder, name = posixpath.split(path)
    return Storage(fs=fs, root=folder, scheme=scheme), name


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def resolve_inputs(specs: list[str] | tuple[str, ...], suffixes: tuple[str, ...]) -> list[tuple[str, str]]:
    """Expand files, folders and globs (local or URI) into ``[(uri, display name)]``.

    Folders are searched recursively for names ending in one of ``suffixes``; a glob is taken as
    it is. A missing path, an empty folder or a glob that matches nothing is a StorageError.
    """
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    for spec in specs:
        fs, path, scheme = parse_uri(spec)
        parts = path.split("/")
        magic_at = next((i for i, part in enumerate(parts) if has_magic(part)), None)
        if magic_at is not None:
            root = Storage(fs=fs, root="/".join(parts[:magic_at]) or "/", scheme=scheme)
            matches = root.glob("/".join(parts[magic_at:]))
            if not matches:
                raise StorageError(f"no files match {spec!r}")
            found = [(root.uri_of(m), display_name(root.uri_of(m))) for m in matches]
        else:
            storage = Storage(fs=fs, root=path, scheme=scheme)
            kind = storage.info().type
            if kind == pafs.FileType.NotFound:
                raise StorageError(f"no such file or folder: {spec!r}")
            if kind == pafs.FileType.File:
                found = [(storage.uri, display_name(storage.uri))]
            else:
                names = [
                    n
                    for n in storage.list_files()
                    if n.endswith(suffixes) and not posixpath.basename(n).startswith(".")
                ]
                if not names:
                    raise StorageError(f"no {' or '.join(suffixes)} files in folder {spec!r}")
                found = [(storage.uri_of(n), display_name(storage.uri_of(n))) for n in names]
        for uri, display in found:
            if uri not in seen:
                seen.add(uri)
                out.append((uri, display))
    return out


def display_name(uri: str) -> str:
    """How to show a file to the user: a URI as it is, a local file relative to the cwd if below it."""
    if "://" in uri:
        return uri
    try:
        rel = os.path.relpath(uri)
    except ValueError:  # pragma: no cover - other drive on Windows
        return uri
    return uri if rel.startswith("..") else rel
