"""The local-disk S3-compatible store that keeps the embedded broker's data: nanio, run as a subprocess.

Tansu's ``s3://`` engine is its only durable engine that needs no database server; nanio serves S3 from a
directory (buckets are folders, objects are files). nanio 0.1.7 lacks what Tansu relies on, so
``StoreMiddleware`` adds it in front of nanio's app:

- Conditional requests. Tansu keeps watermarks, offsets and metadata with conditional PUTs (create only
  if absent, replace only if unchanged); nanio ignored ``If-Match`` and ``If-None-Match``, and a
  restarted broker overwrote its own watermarks, then the next records overwrote the old ones.
- Fast listings (``streams.kafka.object_listing``): Tansu gives up on a listing slower than its fetch's
  ``max_wait``, and nanio's grow with the folder. They also hide a PUT nanio is still writing (staged in
  ``.tmp.<hex>`` beside the object), whose name Tansu would fail to parse as an offset; ``prepare``
  removes the staged files a crash left.

Its answers come before nanio checks the request's signature; they reveal no more than the directory's
file permissions do, and the store listens on 127.0.0.1 only.

Writes are not fsynced: Tansu makes three PUTs per produced batch, one after the other, and two
fsyncs each made a PUT five times slower here (8.3 ms against 1.6 ms). A written object is in the page
cache when Tansu acknowledges it, so it survives the broker, the store and the process that started them
being killed; a power loss or a kernel crash can lose the last seconds of writes.

Run as ``python -m streams.kafka.object_store --data-dir D --port P``; credentials come from
``NANIO_ACCESS_KEY`` and ``NANIO_SECRET_KEY``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import weakref
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qs

from streams.kafka.object_listing import MAX_KEYS, KeyIndex, list_v2_xml

if TYPE_CHECKING:
    from _typeshed import HasFileno
    from nanio.storage.filesystem import FilesystemStorage
    from starlette.types import ASGIApp, Receive, Scope, Send

BUCKET = "edgeledger"
REGION = "us-east-1"
ACCESS_KEY_ENV = "NANIO_ACCESS_KEY"
SECRET_KEY_ENV = "NANIO_SECRET_KEY"
_STAGED_PREFIX = ".tmp."  # nanio's name for a PUT being written
_META_DIR = ".nanio-meta"  # nanio's sidecar directory; its atomic writes stage in ``<name>.tmp``
_HIDDEN = (".nanio", _STAGED_PREFIX)  # names a listing leaves out: nanio's own, and writes in progress


def broker_environment(endpoint: str, access_key: str, secret_key: str) -> dict[str, str]:
    """The variables Tansu's S3 client (object_store's ``AmazonS3Builder::from_env``) reads."""
    return {
        "AWS_ACCESS_KEY_ID": access_key,
        "AWS_SECRET_ACCESS_KEY": secret_key,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_ENDPOINT": endpoint,
        "AWS_ALLOW_HTTP": "true",
    }


def prepare(root: Path, bucket: str = BUCKET) -> None:
    """Create the bucket's folders and remove writes a crash left staged (they would block or pollute)."""
    (root / bucket / _META_DIR).mkdir(parents=True, exist_ok=True)
    for path in _staged_files(root / bucket):
        path.unlink(missing_ok=True)


def _staged_files(bucket_dir: Path) -> Iterable[Path]:
    for folder, _, names in os.walk(bucket_dir):
        in_meta = _META_DIR in Path(folder).relative_to(bucket_dir).parts
        for name in names:
            if name.startswith(_STAGED_PREFIX) or (in_meta and name.endswith(".tmp")):
                yield Path(folder) / name


def _object_of(path: str) -> tuple[str, str] | None:
    """``(bucket, key)`` of an object request's path, None for service and bucket requests."""
    bucket, _, key = path.lstrip("/").partition("/")
    return (bucket, key) if bucket and key else None


def _matches(condition: str, etag: str | None) -> bool:
    """Whether an ``If-Match``/``If-None-Match`` value names the current object (``*``: any object)."""
    if etag is None:
        return False
    current = etag.strip('"')
    for token in condition.split(","):
        token = token.strip().removeprefix("W/").strip('"')
        if token == "*" or token == current:
            return True
    return False


class StoreMiddleware:
    """ASGI middleware in front of nanio: conditional requests, one request per object at a time, and
    listings from a ``KeyIndex`` that each write refreshes."""

    def __init__(self, app: ASGIApp, storage: FilesystemStorage) -> None:
        self._app = app
        self._storage = storage
        self._root = Path(storage.data_dir)
        self._locks: weakref.WeakValueDictionary[tuple[str, str], asyncio.Lock] = weakref.WeakValueDictionary()
        self._indexes: dict[str, KeyIndex] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        target = _object_of(scope["path"])
        if target is None:
            await self._bucket_request(scope, receive, send)
            return
        lock = self._locks.get(target)
        if lock is None:
            lock = self._locks[target] = asyncio.Lock()
        async with lock:
            status, etag = self._refusal(scope, target)
            if status is not None:
                await _respond(send, status, etag, target)
                return
            await self._app(scope, receive, send)
            bucket, key = target
            if scope["method"] not in ("GET", "HEAD") and bucket in self._indexes:
                self._indexes[bucket].refresh(key)

    async def _bucket_request(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A listing from the index; any other bucket request goes to nanio (a write drops the index)."""
        bucket = scope["path"].strip("/")
        query = {k: v[-1] for k, v in parse_qs(scope["query_string"].decode("latin-1")).items()}
        fast = (scope["method"] == "GET" and bucket and query.get("list-type") == "2"
                and "delimiter" not in query and "encoding-type" not in query)
        if not fast or not (self._root / bucket).is_dir():
            self._indexes.pop(bucket, None)
            await self._app(scope, receive, send)
            return
        index = self._indexes.get(bucket)
        if index is None:
            index = self._indexes[bucket] = KeyIndex(self._root / bucket, _HIDDEN)
        prefix = query.get("prefix", "")
        max_keys = min(int(query.get("max-keys", MAX_KEYS)), MAX_KEYS)
        entries, more_after = index.page(prefix, query.get("continuation-token") or query.get("start-after"),
                                         max_keys)
        body = list_v2_xml(bucket, prefix, entries, max_keys, more_after)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/xml"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    def _refusal(self, scope: Scope, target: tuple[str, str]) -> tuple[int | None, str | None]:
        """The status refusing this request, if a condition fails, with the object's current ETag."""
        headers = {name.lower(): value.decode("latin-1") for name, value in scope["headers"]}
        if_match, if_none_match = headers.get(b"if-match"), headers.get(b"if-none-match")
        method = scope["method"]
        if (if_match is None and if_none_match is None) or method not in ("GET", "HEAD", "PUT"):
            return None, None
        if method == "PUT" and (b"uploadId" in scope["query_string"] or b"x-amz-copy-source" in headers):
            return None, None
        etag = self._etag(*target)
        if if_match is not None and not _matches(if_match, etag):
            return 412, etag
        if if_none_match is not None and _matches(if_none_match, etag):
            return (412 if method == "PUT" else 304), etag
        return None, etag

    def _etag(self, bucket: str, key: str) -> str | None:
        from nanio.errors import S3Error

        try:
            return self._storage.head_object(bucket, key).etag
        except S3Error:
            return None


async def _respond(send: Send, status: int, etag: str | None, target: tuple[str, str]) -> None:
    from nanio.errors import PreconditionFailed

    body = PreconditionFailed(resource="/".join(target)).to_xml() if status == 412 else b""
    headers = [(b"content-length", str(len(body)).encode())]
    if body:
        headers.append((b"content-type", b"application/xml"))
    if etag is not None:
        headers.append((b"etag", etag.encode("latin-1")))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def build_app(root: Path) -> ASGIApp:
    """nanio's app over ``root``, behind ``StoreMiddleware``."""
    from nanio.app import build_app as build_nanio
    from nanio.auth.credentials import EnvCredentialResolver
    from nanio.config import Settings

    app = build_nanio(Settings(data_dir=root.resolve(), host="127.0.0.1", region=REGION, access_log=False,
                               credentials=EnvCredentialResolver()))
    return StoreMiddleware(app, app.state.storage)


def _no_fsync(fd: int | HasFileno) -> None:
    """Stands in for ``os.fsync`` in the store's process."""


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m streams.kafka.object_store", description=__doc__)
    parser.add_argument("--data-dir", type=Path, required=True, help="Root of the buckets.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    import uvicorn

    prepare(args.data_dir)
    os.fsync = _no_fsync  # this process is the store alone; see the module's docstring
    uvicorn.run(build_app(args.data_dir), host=args.host, port=args.port, log_level="warning",
                access_log=False, lifespan="off")


if __name__ == "__main__":
    main()
