"""The disk broker's object store, without a broker: what Tansu's S3 engine relies on from it."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

from streams.kafka.object_listing import KeyIndex
from streams.kafka.object_store import StoreMiddleware, prepare


class _Storage:
    """What the middleware asks of nanio's storage: its root, and the current ETag of an object."""

    def __init__(self, root: Path, etags: dict[tuple[str, str], str]) -> None:
        self.data_dir = root
        self.etags = etags

    def head_object(self, bucket: str, key: str) -> object:
        from nanio.errors import NoSuchKey

        if (bucket, key) not in self.etags:
            raise NoSuchKey(resource=f"{bucket}/{key}")
        return type("Info", (), {"etag": self.etags[bucket, key]})()


def _call(middleware: StoreMiddleware, method: str, path: str, headers: dict[str, str] | None = None,
          query: str = "") -> tuple[int, bytes]:
    """The status and body the middleware answers with (200 and no body: it passed the request on)."""
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    scope = {"type": "http", "method": method, "path": path, "query_string": query.encode(),
             "headers": [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]}
    asyncio.run(middleware(scope, receive, send))  # type: ignore[arg-type]
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return int(sent[0]["status"]), body


def _passing(writes: Path | None = None) -> Any:
    """An inner app answering 200; for a PUT, it writes the object under ``writes`` first, as nanio does."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if writes is not None and scope["method"] == "PUT":
            target = writes / scope["path"].lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(b"x")
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    return app


def test_the_store_enforces_conditional_writes_and_reads(tmp_path: Path) -> None:
    """What Tansu's watermarks and offsets rely on: create-if-absent and replace-if-unchanged PUTs,
    and If-None-Match reads that answer 304 while the object is unchanged."""
    store = StoreMiddleware(_passing(), _Storage(tmp_path, {("b", "k/watermark.json"): '"abc"'}))  # type: ignore[arg-type]

    def status(method: str, path: str, headers: dict[str, str]) -> int:
        return _call(store, method, path, headers)[0]

    assert status("PUT", "/b/k/watermark.json", {"If-None-Match": "*"}) == 412
    assert status("PUT", "/b/k/new.json", {"If-None-Match": "*"}) == 200
    assert status("PUT", "/b/k/watermark.json", {"If-Match": '"abc"'}) == 200
    assert status("PUT", "/b/k/watermark.json", {"If-Match": '"old"'}) == 412
    assert status("PUT", "/b/k/new.json", {"If-Match": '"abc"'}) == 412
    assert status("GET", "/b/k/watermark.json", {"If-None-Match": '"abc"'}) == 304
    assert status("GET", "/b/k/watermark.json", {"If-None-Match": '"old"'}) == 200
    assert status("PUT", "/b/k/watermark.json", {}) == 200


def _keys(body: bytes) -> list[str]:
    return re.findall(r"<Key>(.*?)</Key>", body.decode())


def test_listings_are_in_key_order_hide_writes_in_progress_and_follow_each_write(tmp_path: Path) -> None:
    records = tmp_path / "b" / "t" / "records"
    records.mkdir(parents=True)
    (tmp_path / "b" / ".nanio-meta").mkdir()
    for name in ("00000000000000000002.batch", "00000000000000000000.batch", ".tmp.0af3"):
        (records / name).write_bytes(b"x")
    (tmp_path / "b" / "t" / "watermark.json").write_bytes(b"{}")
    store = StoreMiddleware(_passing(tmp_path), _Storage(tmp_path, {}))  # type: ignore[arg-type]

    status, body = _call(store, "GET", "/b", query="list-type=2&prefix=t/records/")
    assert status == 200
    assert _keys(body) == ["t/records/00000000000000000000.batch", "t/records/00000000000000000002.batch"]
    assert _call(store, "PUT", "/b/t/records/00000000000000000001.batch")[0] == 200
    assert _keys(_call(store, "GET", "/b/", query="list-type=2&prefix=t/")[1]) == [
        "t/records/00000000000000000000.batch", "t/records/00000000000000000001.batch",
        "t/records/00000000000000000002.batch", "t/watermark.json"]


def test_a_listing_pages_by_continuation_token(tmp_path: Path) -> None:
    (tmp_path / "p").mkdir()
    for n in range(5):
        (tmp_path / "p" / f"{n:03d}").write_bytes(b"x")
    index = KeyIndex(tmp_path, (".nanio",))
    first, after = index.page("p/", None, 2)
    second, then = index.page("p/", after, 2)
    last, end = index.page("p/", then, 2)
    assert (after, then, end) == ("p/001", "p/003", None)
    assert [len(page) for page in (first, second, last)] == [2, 2, 1]
    (tmp_path / "p" / "001").unlink()
    index.refresh("p/001")
    assert index.page("p/", None, 10)[0] == first[:1] + second + last


def test_the_store_removes_writes_a_crash_left_staged(tmp_path: Path) -> None:
    records = tmp_path / "edgeledger" / "topics" / "records"
    meta = tmp_path / "edgeledger" / ".nanio-meta" / "topics"
    records.mkdir(parents=True)
    meta.mkdir(parents=True)
    for path in (records / "00000000000000000000.batch", records / ".tmp.0af3", meta / "w.json",
                 meta / "w.json.tmp"):
        path.write_bytes(b"x")
    prepare(tmp_path)
    assert sorted(p.name for p in records.iterdir()) == ["00000000000000000000.batch"]
    assert sorted(p.name for p in meta.iterdir()) == ["w.json"]
