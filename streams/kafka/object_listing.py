"""Fast bucket listings for the object store: every key in order in memory, each entry's XML rendered once.

Tansu lists a partition's whole ``records/`` folder on every fetch that starts behind the end, and
stops reading the listing once the fetch's ``max_wait`` has passed: a fetch whose listing is too slow
returns nothing, and the consumer asks again, for ever. nanio builds a listing from disk, reading
every object's metadata file, about 50 µs an entry; from this index it is a slice of a sorted map.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from xml.sax.saxutils import escape

from sortedcontainers import SortedDict

MAX_KEYS = 1000  # S3's page size


def _entry(key: str, size: int, mtime: float) -> str:
    modified = datetime.fromtimestamp(mtime, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    return (f"<Contents><Key>{escape(key)}</Key><LastModified>{modified}</LastModified>"
            f"<Size>{size}</Size><StorageClass>STANDARD</StorageClass></Contents>")


class KeyIndex:
    """The keys of one bucket, kept in step with the writes the store serves (``refresh`` after each)."""

    def __init__(self, bucket_dir: Path, hidden: tuple[str, ...]) -> None:
        self._dir = bucket_dir
        self._hidden = hidden
        self._entries: SortedDict[str, str] = SortedDict()
        for key, size, mtime in self._scan(bucket_dir, ""):
            self._entries[key] = _entry(key, size, mtime)

    def _scan(self, folder: Path, prefix: str) -> Iterator[tuple[str, int, float]]:
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.name.startswith(self._hidden):
                    continue
                if entry.is_dir(follow_symlinks=False):
                    yield from self._scan(Path(entry.path), f"{prefix}{entry.name}/")
                elif entry.is_file(follow_symlinks=False):
                    stat = entry.stat(follow_symlinks=False)
                    yield f"{prefix}{entry.name}", stat.st_size, stat.st_mtime

    def refresh(self, key: str) -> None:
        """Take the object at ``key`` as it is on disk now: present, replaced or gone."""
        try:
            stat = os.stat(self._dir / key, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            self._entries.pop(key, None)
            return
        self._entries[key] = _entry(key, stat.st_size, stat.st_mtime)

    def page(self, prefix: str, after: str | None, max_keys: int) -> tuple[list[str], str | None]:
        """Up to ``max_keys`` entries under ``prefix`` past ``after``, and the last key when more follow."""
        if after is not None and after >= prefix:
            keys = self._entries.irange(minimum=after, inclusive=(False, True))
        else:
            keys = self._entries.irange(minimum=prefix)
        taken: list[str] = []
        last: str | None = None
        for key in keys:
            if not key.startswith(prefix):
                return taken, None
            if len(taken) == max_keys:
                return taken, last
            taken.append(self._entries[key])
            last = key
        return taken, None


def list_v2_xml(bucket: str, prefix: str, entries: list[str], max_keys: int, more_after: str | None) -> bytes:
    """A ListObjectsV2 result; the continuation token is the last key listed."""
    token = f"<NextContinuationToken>{escape(more_after)}</NextContinuationToken>" if more_after else ""
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
        f"<Name>{escape(bucket)}</Name><Prefix>{escape(prefix)}</Prefix><KeyCount>{len(entries)}</KeyCount>"
        f"<MaxKeys>{max_keys}</MaxKeys><IsTruncated>{'true' if more_after else 'false'}</IsTruncated>{token}"
        f"{''.join(entries)}</ListBucketResult>"
    ).encode()
