"""S3 and S3-compatible object storage: ``s3://bucket/prefix``.

One of the Store backends of :mod:`tensortap.storage`, none of which imports a client library
at module level (``tests/layout/test_imports.py``): boto3 is imported only when an ``s3://``
location is opened. (``tensortap.storage._s3`` re-exports it for old imports.)

Credentials and region come from boto3's usual places (environment variables, AWS config and
credential files, instance roles). The endpoint of an S3-compatible server comes from
``$AWS_ENDPOINT_URL_S3`` or ``$AWS_ENDPOINT_URL`` (read by boto3 itself) or the ``endpoint_url``
argument. Nothing this module logs or raises contains a secret.

Every request goes through :meth:`S3Store._call`, which counts it and retries transient
failures (lost connections, timeouts, 5xx, throttling) with jittered exponential backoff; what
still fails raises :class:`StorageError` with ``transient`` set, so the background writer can
keep the data and try again later. ``get_ranges`` fetches many ranges in parallel, splitting
large ones into chunks.

Objects are written whole: ``put`` is one PUT, and a writer buffers up to ``part_size`` bytes
and then switches to a multipart upload (:mod:`tensortap.storage._s3_upload`), completed by
``commit`` and aborted by ``abort``.
In both cases the object appears atomically, as the Store contract requires. Every key is
validated and placed under the prefix, so nothing can be written outside it.
"""

from __future__ import annotations

import builtins
import datetime
import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from tensortap.exceptions import InvalidConfigError, StorageError
from tensortap.storage._base import ObjectWriter, Store, StoreCapabilities, validate_key
from tensortap.storage._resolve import register_store

T = TypeVar("T")
logger = logging.getLogger(__name__)

PART_SIZE = 8 << 20  # S3's minimum part is 5 MiB
READ_CHUNK = 8 << 20  # a larger range is fetched as parallel chunks of this size
PARALLEL_READS = 16
MAX_ATTEMPTS = 6
_TRANSIENT_CODES = {
    "500",
    "502",
    "503",
    "504",
    "InternalError",
    "ServiceUnavailable",
    "SlowDown",
    "Throttling",
    "ThrottlingException",
    "RequestTimeout",
    "RequestTimeTooSkewed",
    "RequestLimitExceeded",
}
_MISSING_CODES = {"404", "NoSuchKey", "NotFound"}


def _client(endpoint_url: str | None) -> Any:
    try:
        import boto3
        from botocore.config import Config
    except ImportError as exc:  # pragma: no cover - boto3 comes with tensortap[s3]
        raise InvalidConfigError("s3:// locations need boto3: pip install 'tensortap[s3]'") from exc
    config = Config(
        retries={"total_max_attempts": 1},  # S3Store._call retries, and counts
        connect_timeout=10,
        read_timeout=60,
        max_pool_connections=PARALLEL_READS + 4,
    )
    return boto3.client("s3", endpoint_url=endpoint_url, config=config)


def server_age(answer: dict[str, Any]) -> float | None:
    """How long ago (seconds) the object in a GetObject ``answer`` was last written, by the
    server's clock alone: the response's ``Date`` header minus the object's ``Last-Modified``
    (both stamped by the server, so no client's clock enters). None when either is missing or
    unreadable. Both have one-second resolution."""
    import email.utils  # here: it costs every `import tensortap` a few ms otherwise

    modified = answer.get("LastModified")
    headers = answer.get("ResponseMetadata", {}).get("HTTPHeaders", {})
    date = headers.get("date") if isinstance(headers, dict) else None
    if not isinstance(modified, datetime.datetime) or not isinstance(date, str):
        return None
    try:
        now = email.utils.parsedate_to_datetime(date)
        if now.tzinfo is None or modified.tzinfo is None:
            return None
        return (now - modified).total_seconds()
    except (TypeError, ValueError):
        return None


def error_code(exc: BaseException) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", "")) or str(
            response.get("ResponseMetadata", {}).get("HTTPStatusCode", "")
        )
    return ""


def is_transient(exc: BaseException) -> bool:
    """Whether a failed request is worth retrying: the connection or the server, not the
    request, was at fault."""
    code = error_code(exc)
    if code:
        return code in _TRANSIENT_CODES
    try:
        from botocore.exceptions import ConnectionError as BotoConnectionError
        from botocore.exceptions import HTTPClientError, IncompleteReadError
        from urllib3.exceptions import HTTPError
    except ImportError:  # pragma: no cover
        return isinstance(exc, OSError)
    return isinstance(
        exc, (BotoConnectionError, HTTPClientError, IncompleteReadError, HTTPError, OSError)
    )


class S3Store(Store):
    """The objects under ``s3://bucket/prefix``."""

    cache_bytes = 64 << 20
    refresh_interval = 1.0
    capabilities = StoreCapabilities(conditional_put=True, lists_trials=True)

    def __init__(
        self,
        url: str,
        endpoint_url: str | None = None,
        client: Any = None,
        part_size: int = PART_SIZE,
        max_attempts: int = MAX_ATTEMPTS,
        parallel_reads: int = PARALLEL_READS,
    ) -> None:
        if not url.startswith("s3://"):
            raise InvalidConfigError(f"expected an s3://bucket/prefix URL, got {url!r}")
        bucket, _, prefix = url[len("s3://") :].partition("/")
        if not bucket:
            raise InvalidConfigError(f"no bucket in {url!r}; write s3://bucket/prefix")
        if part_size < 5 << 20:
            raise InvalidConfigError(
                f"part_size must be at least 5 MiB (S3's minimum), got {part_size}"
            )
        if max_attempts < 1 or parallel_reads < 1:
            raise InvalidConfigError(
                "max_attempts and parallel_reads must be >= 1, got "
                f"{max_attempts} and {parallel_reads}"
            )
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        if self.prefix:
            validate_key(self.prefix)
        self.location = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        self.part_size = part_size
        self.max_attempts = max_attempts
        self.parallel_reads = parallel_reads
        self.requests: Counter[str] = Counter()
        self.retries = 0
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self.client = client if client is not None else _client(endpoint_url)
        self._check_bucket()

    # -- requests, counted and retried --
    def _call(self, op: str, fn: Callable[[], T]) -> T:
        attempt = 1
        while True:
            with self._lock:
                self.requests[op] += 1
            try:
                return fn()
            except Exception as exc:
                if attempt >= self.max_attempts or not is_transient(exc):
                    raise
            with self._lock:
                self.retries += 1
            time.sleep(min(5.0, 0.05 * 2**attempt) * random.uniform(0.5, 1.0))
            attempt += 1

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {
                "requests": sum(self.requests.values()),
                "by_operation": dict(self.requests),
                "retries": self.retries,
            }

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None

    # -- keys and errors --
    def _key(self, key: str) -> str:
        validate_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def _dir(self, prefix: str) -> str:
        """The full key prefix of a "directory" (ending in '/', or empty at the bucket root)."""
        if prefix:
            return self._key(prefix.rstrip("/")) + "/"
        return f"{self.prefix}/" if self.prefix else ""

    def _relative(self, full: str) -> str:
        return full[len(self.prefix) + 1 :] if self.prefix else full

    def _error(self, exc: Exception, doing: str) -> StorageError:
        code = error_code(exc) or type(exc).__name__
        transient = is_transient(exc)
        after = f" after {self.max_attempts} attempts" if transient else ""
        return StorageError(
            f"{doing} in s3://{self.bucket} failed{after}: {code}", transient=transient
        )

    def _check_bucket(self) -> None:
        try:
            self._call("HeadBucket", lambda: self.client.head_bucket(Bucket=self.bucket))
        except Exception as exc:
            code = error_code(exc)
            if code in ("404", "NoSuchBucket"):
                raise StorageError(
                    f"no bucket {self.bucket!r} at this endpoint: create it, or check the "
                    "bucket name and the endpoint ($AWS_ENDPOINT_URL)"
                ) from None
            if code in ("403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
                raise StorageError(
                    f"access to bucket {self.bucket!r} was denied ({code}): check the "
                    "credentials (AWS_ACCESS_KEY_ID / AWS_PROFILE) and the bucket policy"
                ) from None
            if type(exc).__name__ in ("NoCredentialsError", "PartialCredentialsError"):
                raise StorageError(
                    f"no AWS credentials found for bucket {self.bucket!r}: set "
                    "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE"
                ) from None
            raise self._error(exc, "reaching the bucket") from None

    # -- reading --
    def _read(self, key: str, byte_range: str | None = None) -> tuple[bytes, str, float | None]:
        """An object's bytes (or a range of them), its ETag and its age by the server's clock
        (:func:`server_age`)."""
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": self._key(key)}
        if byte_range is not None:
            kwargs["Range"] = byte_range

        def fetch() -> tuple[bytes, str, float | None]:  # the body is read inside the retry
            answer = self.client.get_object(**kwargs)
            return answer["Body"].read(), str(answer.get("ETag", "")), server_age(answer)

        try:
            return self._call("GetObject", fetch)
        except Exception as exc:
            if error_code(exc) in ("NoSuchKey", "404"):
                raise KeyError(key) from None
            raise self._error(exc, f"reading {key}") from None

    def get(self, key: str) -> bytes:
        return self._read(key)[0]

    def get_range(self, key: str, start: int, length: int) -> bytearray:
        if length == 0:
            return bytearray()
        data = bytearray(self._read(key, f"bytes={start}-{start + length - 1}")[0])
        if len(data) != length:
            raise StorageError(
                f"s3://{self.bucket}/{self._key(key)} is shorter than expected "
                f"({start + len(data)} < {start + length}): truncated or corrupt"
            )
        return data

    def _parallel(self, fn: Callable[[Any], T], items: Sequence[Any]) -> builtins.list[T]:
        if len(items) <= 1:
            return [fn(item) for item in items]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.parallel_reads, "tensortap-s3-read")
        return list(self._pool.map(fn, items))

    def get_many(self, keys: Sequence[str]) -> builtins.list[bytes]:
        return self._parallel(self.get, keys)

    def _head(self, key: str) -> dict[str, Any]:
        """The object's HEAD answer (KeyError when it is missing)."""
        full = self._key(key)
        try:
            return dict(
                self._call(
                    "HeadObject", lambda: self.client.head_object(Bucket=self.bucket, Key=full)
                )
            )
        except Exception as exc:
            if error_code(exc) in _MISSING_CODES:
                raise KeyError(key) from None
            raise self._error(exc, f"looking at {key}") from None

    def size(self, key: str) -> int:
        return int(self._head(key)["ContentLength"])

    def version(self, key: str) -> str:
        """Size and ETag of the object (one HEAD request)."""
        head = self._head(key)
        return f"{int(head['ContentLength'])}:{head.get('ETag', '')}"

    def get_ranges(self, ranges: Sequence[tuple[str, int, int]]) -> builtins.list[bytearray]:
        """Every range at once: up to ``parallel_reads`` requests in flight, a large range
        split into chunks of READ_CHUNK bytes, after checking it against the object's real
        size (a corrupt index must not queue thousands of requests)."""
        sizes: dict[str, int] = {}
        for key, start, length in ranges:
            if length > READ_CHUNK or start < 0 or length < 0:
                if key not in sizes:
                    sizes[key] = self.size(key)
                if start < 0 or length < 0 or start + length > sizes[key]:
                    raise StorageError(
                        f"s3://{self.bucket}/{self._key(key)} has {sizes[key]} bytes; bytes "
                        f"[{start}, {start + length}) were asked for: truncated, or the index "
                        "pointing into it is corrupt"
                    )
        pieces = [
            (i, key, at, min(READ_CHUNK, start + length - at))
            for i, (key, start, length) in enumerate(ranges)
            for at in range(start, start + length, READ_CHUNK)
        ]
        fetched = self._parallel(lambda p: self.get_range(p[1], p[2], p[3]), pieces)
        out = [bytearray() for _ in ranges]
        for (i, *_), data in zip(pieces, fetched, strict=True):
            out[i] += data
        return out

    def exists(self, key: str) -> bool:
        full = self._key(key)
        try:
            self._call("HeadObject", lambda: self.client.head_object(Bucket=self.bucket, Key=full))
        except Exception as exc:
            if error_code(exc) in _MISSING_CODES:
                return False
            raise self._error(exc, f"looking for {key}") from None
        return True

    def _pages(self, doing: str, **kwargs: Any) -> builtins.list[dict[str, Any]]:
        pages: builtins.list[dict[str, Any]] = []
        kwargs["Bucket"] = self.bucket
        try:
            while True:
                page = self._call("ListObjectsV2", lambda: self.client.list_objects_v2(**kwargs))
                pages.append(page)
                if not page.get("IsTruncated"):
                    return pages
                kwargs["ContinuationToken"] = page["NextContinuationToken"]
        except Exception as exc:
            raise self._error(exc, doing) from None

    def list(self, prefix: str = "", start_after: str | None = None) -> builtins.list[str]:
        kwargs: dict[str, Any] = {"Prefix": self._dir(prefix)}
        if start_after:
            kwargs["StartAfter"] = self._key(start_after)
        pages = self._pages(f"listing {prefix or '/'}", **kwargs)
        return sorted(self._relative(o["Key"]) for p in pages for o in p.get("Contents", []))

    def list_dir(self, prefix: str = "") -> builtins.list[str]:
        full = self._dir(prefix)
        names: set[str] = set()
        for page in self._pages(f"listing {prefix or '/'}", Prefix=full, Delimiter="/"):
            names.update(
                p["Prefix"][len(full) :].rstrip("/") for p in page.get("CommonPrefixes", [])
            )
            names.update(o["Key"][len(full) :] for o in page.get("Contents", []))
        return sorted(n for n in names if n)

    # -- writing --
    def put(self, key: str, data: bytes) -> None:
        full, body = self._key(key), bytes(data)
        try:
            self._call(
                "PutObject", lambda: self.client.put_object(Bucket=self.bucket, Key=full, Body=body)
            )
        except Exception as exc:
            raise self._error(exc, f"writing {key}") from None

    def put_conditional(
        self, key: str, data: bytes, if_none_match: bool = False, if_match: str | None = None
    ) -> str | None:
        """Write ``key`` only if it does not exist (``if_none_match``) or still has ETag
        ``if_match``; the new ETag, or None when the condition failed (another writer won)."""
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": self._key(key), "Body": bytes(data)}
        if if_none_match:
            kwargs["IfNoneMatch"] = "*"
        if if_match:
            kwargs["IfMatch"] = if_match
        try:
            answer = self._call("PutObject", lambda: self.client.put_object(**kwargs))
        except Exception as exc:
            code = error_code(exc)
            if code in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409"):
                return None
            if code in ("NotImplemented", "501"):  # an S3-compatible server without them
                logger.warning(
                    "the S3 server at %s does not support conditional writes: tensortap "
                    "cannot stop two writers sharing a worker there",
                    self.location,
                )
                self.put(key, data)
                return ""
            raise self._error(exc, f"writing {key}") from None
        return str(answer.get("ETag", ""))

    def get_with_etag(self, key: str) -> tuple[bytes, str]:
        """An object's bytes and its ETag (KeyError if missing)."""
        return self._read(key)[:2]

    def get_with_age(self, key: str) -> tuple[bytes, str, float | None]:
        """An object's bytes, its ETag and how many seconds ago it was last written, by the
        server's clock alone (KeyError if missing; see :func:`server_age`)."""
        return self._read(key)

    def open_writer(self, key: str) -> ObjectWriter:
        from tensortap.storage._s3_upload import S3Upload

        return S3Upload(self, key)

    def delete(self, key: str) -> None:
        full = self._key(key)
        try:
            self._call(
                "DeleteObject", lambda: self.client.delete_object(Bucket=self.bucket, Key=full)
            )
        except Exception as exc:
            raise self._error(exc, f"deleting {key}") from None


register_store("s3", S3Store)  # boto3 is imported when an s3:// location is opened
