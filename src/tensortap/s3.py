"""S3 and S3-compatible object storage: ``s3://bucket/prefix``.

A Store backend kept outside :mod:`tensortap.storage`, whose modules import no client library
(``tests/test_imports.py``): boto3 is imported only when an ``s3://`` location is opened.

Credentials and region come from boto3's usual places (environment variables, AWS config and
credential files, instance roles). The endpoint of an S3-compatible server comes from
``$AWS_ENDPOINT_URL_S3`` or ``$AWS_ENDPOINT_URL`` (read by boto3 itself) or the ``endpoint_url``
argument. Nothing this module logs or raises contains a secret.

Objects are written whole: ``put`` is one PUT, and a writer buffers up to ``part_size`` bytes
and then switches to a multipart upload, completed by ``commit`` and aborted by ``abort``.
In both cases the object appears atomically, as the Store contract requires. Every key is
validated and placed under the prefix, so nothing can be written outside it.
"""

from __future__ import annotations

import builtins
from typing import Any

from tensortap.exceptions import InvalidConfigError, StorageError
from tensortap.storage.base import ObjectWriter, Store, validate_key

PART_SIZE = 8 << 20  # S3's minimum part is 5 MiB


def _client(endpoint_url: str | None) -> Any:
    try:
        import boto3
        from botocore.config import Config
    except ImportError as exc:  # pragma: no cover - boto3 comes with tensortap[s3]
        raise InvalidConfigError("s3:// locations need boto3: pip install 'tensortap[s3]'") from exc
    config = Config(retries={"max_attempts": 8, "mode": "adaptive"}, connect_timeout=10)
    return boto3.client("s3", endpoint_url=endpoint_url, config=config)


class S3Store(Store):
    """The objects under ``s3://bucket/prefix``."""

    def __init__(
        self,
        url: str,
        endpoint_url: str | None = None,
        client: Any = None,
        part_size: int = PART_SIZE,
    ) -> None:
        if not url.startswith("s3://"):
            raise InvalidConfigError(f"expected an s3://bucket/prefix URL, got {url!r}")
        bucket, _, prefix = url[len("s3://") :].partition("/")
        if not bucket:
            raise InvalidConfigError(f"no bucket in {url!r}; write s3://bucket/prefix")
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        if self.prefix:
            validate_key(self.prefix)
        self.location = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        self.part_size = part_size
        self.client = client if client is not None else _client(endpoint_url)
        self._check_bucket()

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
        code = getattr(exc, "response", {}).get("Error", {}).get("Code", type(exc).__name__)
        return StorageError(f"{doing} in s3://{self.bucket} failed: {code}")

    def _check_bucket(self) -> None:
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except Exception as exc:
            code = getattr(exc, "response", {}).get("Error", {}).get("Code", "")
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
            raise self._error(exc, "reaching the bucket") from None

    # -- reading --
    def get(self, key: str) -> bytes:
        try:
            body: bytes = self.client.get_object(Bucket=self.bucket, Key=self._key(key))[
                "Body"
            ].read()
        except self.client.exceptions.NoSuchKey:
            raise KeyError(key) from None
        except Exception as exc:
            raise self._error(exc, f"reading {key}") from None
        return body

    def get_range(self, key: str, start: int, length: int) -> bytearray:
        if length == 0:
            return bytearray()
        try:
            response = self.client.get_object(
                Bucket=self.bucket, Key=self._key(key), Range=f"bytes={start}-{start + length - 1}"
            )
            data = bytearray(response["Body"].read())
        except self.client.exceptions.NoSuchKey:
            raise KeyError(key) from None
        except Exception as exc:
            raise self._error(exc, f"reading {key}") from None
        if len(data) != length:
            raise StorageError(
                f"s3://{self.bucket}/{self._key(key)} is shorter than expected "
                f"({start + len(data)} < {start + length}): truncated or corrupt"
            )
        return data

    def exists(self, key: str) -> bool:
        try:
            self.client.head_object(Bucket=self.bucket, Key=self._key(key))
        except Exception as exc:
            code = getattr(exc, "response", {}).get("Error", {}).get("Code", "")
            if code in ("404", "NoSuchKey", "NotFound"):
                return False
            raise self._error(exc, f"looking for {key}") from None
        return True

    def list(self, prefix: str = "", start_after: str | None = None) -> builtins.list[str]:
        full = (
            self._key(prefix.rstrip("/")) + "/"
            if prefix
            else (f"{self.prefix}/" if self.prefix else "")
        )
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": full}
        if start_after:
            kwargs["StartAfter"] = self._key(start_after)
        keys: builtins.list[str] = []
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(**kwargs):
                keys += [self._relative(o["Key"]) for o in page.get("Contents", [])]
        except Exception as exc:
            raise self._error(exc, f"listing {prefix or '/'}") from None
        return sorted(keys)

    def list_dir(self, prefix: str = "") -> builtins.list[str]:
        full = (
            self._key(prefix.rstrip("/")) + "/"
            if prefix
            else (f"{self.prefix}/" if self.prefix else "")
        )
        names: set[str] = set()
        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=full, Delimiter="/"
            )
            for page in pages:
                names.update(
                    p["Prefix"][len(full) :].rstrip("/") for p in page.get("CommonPrefixes", [])
                )
                names.update(o["Key"][len(full) :] for o in page.get("Contents", []))
        except Exception as exc:
            raise self._error(exc, f"listing {prefix or '/'}") from None
        return sorted(n for n in names if n)

    # -- writing --
    def put(self, key: str, data: bytes) -> None:
        try:
            self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=bytes(data))
        except Exception as exc:
            raise self._error(exc, f"writing {key}") from None

    def open_writer(self, key: str) -> ObjectWriter:
        return _S3Writer(self, key)

    def delete(self, key: str) -> None:
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self._key(key))
        except Exception as exc:
            raise self._error(exc, f"deleting {key}") from None


class _S3Writer(ObjectWriter):
    """Buffers up to a part, then uploads parts; the object appears at ``commit``."""

    def __init__(self, store: S3Store, key: str) -> None:
        self.store, self.key, self.full = store, key, store._key(key)
        self.buffer = bytearray()
        self.upload_id: str | None = None
        self.parts: list[dict[str, Any]] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.buffer += data
        while len(self.buffer) >= self.store.part_size:
            self._upload(bytes(self.buffer[: self.store.part_size]))
            del self.buffer[: self.store.part_size]

    def _upload(self, part: bytes) -> None:
        store = self.store
        try:
            if self.upload_id is None:
                self.upload_id = store.client.create_multipart_upload(
                    Bucket=store.bucket, Key=self.full
                )["UploadId"]
            number = len(self.parts) + 1
            etag = store.client.upload_part(
                Bucket=store.bucket,
                Key=self.full,
                UploadId=self.upload_id,
                PartNumber=number,
                Body=part,
            )["ETag"]
        except Exception as exc:
            raise store._error(exc, f"uploading {self.key}") from None
        self.parts.append({"PartNumber": number, "ETag": etag})

    def commit(self) -> None:
        store = self.store
        if self.upload_id is None:
            store.put(self.key, bytes(self.buffer))
            return
        if self.buffer:
            self._upload(bytes(self.buffer))
        try:
            store.client.complete_multipart_upload(
                Bucket=store.bucket,
                Key=self.full,
                UploadId=self.upload_id,
                MultipartUpload={"Parts": self.parts},
            )
        except Exception as exc:
            raise store._error(exc, f"completing {self.key}") from None

    def abort(self) -> None:
        if self.upload_id is not None:
            try:
                self.store.client.abort_multipart_upload(
                    Bucket=self.store.bucket, Key=self.full, UploadId=self.upload_id
                )
            except Exception:  # never raises
                pass
        self.buffer = bytearray()
