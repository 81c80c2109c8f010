"""Writing one S3 object: buffered up to a part, then a multipart upload; the object appears
atomically at ``commit`` (split out of :mod:`tensortap.storage._s3`, whose store opens it)."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from tensortap.exceptions import StorageError
from tensortap.storage._base import ObjectWriter
from tensortap.storage._s3 import error_code

if TYPE_CHECKING:
    from tensortap.storage._s3 import S3Store


class S3Upload(ObjectWriter):
    """Buffers up to a part, then uploads parts; the object appears at ``commit``.

    A part that fails to upload for a transient reason stays in the buffer and is tried again
    at the next ``write`` or at ``commit``; ``commit`` can itself be called again after a
    transient failure, so the background writer can retry a segment without losing or
    repeating bytes.
    """

    def __init__(self, store: S3Store, key: str) -> None:
        self.store, self.key, self.full = store, key, store._key(key)
        self.buffer = bytearray()
        self.size = 0
        self.upload_id: str | None = None
        self.parts: list[dict[str, Any]] = []
        self.done = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.buffer += data
        self.size += len(data)
        if len(self.buffer) >= self.store.part_size:
            try:
                self._upload_parts(final=False)
            except StorageError as exc:
                if not exc.transient:
                    raise  # otherwise the bytes stay buffered for the next try

    def _upload_parts(self, final: bool) -> None:
        store, size = self.store, self.store.part_size
        try:
            if self.upload_id is None:
                self.upload_id = store._call(
                    "CreateMultipartUpload",
                    lambda: store.client.create_multipart_upload(
                        Bucket=store.bucket, Key=self.full
                    ),
                )["UploadId"]
            while len(self.buffer) >= size or (final and self.buffer):
                part, number = bytes(self.buffer[:size]), len(self.parts) + 1
                etag = store._call(
                    "UploadPart",
                    partial(
                        store.client.upload_part,
                        Bucket=store.bucket,
                        Key=self.full,
                        UploadId=self.upload_id,
                        PartNumber=number,
                        Body=part,
                    ),
                )["ETag"]
                self.parts.append({"PartNumber": number, "ETag": etag})
                del self.buffer[:size]
        except Exception as exc:
            raise store._error(exc, f"uploading {self.key}") from None

    def commit(self) -> None:
        if self.done:
            return
        store = self.store
        if self.upload_id is None and len(self.buffer) < store.part_size:
            store.put(self.key, bytes(self.buffer))
            self.done = True
            return
        self._upload_parts(final=True)
        try:
            store._call(
                "CompleteMultipartUpload",
                lambda: store.client.complete_multipart_upload(
                    Bucket=store.bucket,
                    Key=self.full,
                    UploadId=self.upload_id,
                    MultipartUpload={"Parts": self.parts},
                ),
            )
        except Exception as exc:
            # a retried completion whose first answer was lost: the object is there
            if not (error_code(exc) == "NoSuchUpload" and self._completed()):
                raise store._error(exc, f"completing {self.key}") from None
        self.done = True

    def _completed(self) -> bool:
        store = self.store
        try:
            head = store._call(
                "HeadObject", lambda: store.client.head_object(Bucket=store.bucket, Key=self.full)
            )
        except Exception:
            return False
        return int(head.get("ContentLength", -1)) == self.size

    def abort(self) -> None:
        if self.upload_id is not None and not self.done:
            store = self.store
            try:
                store._call(
                    "AbortMultipartUpload",
                    lambda: store.client.abort_multipart_upload(
                        Bucket=store.bucket, Key=self.full, UploadId=self.upload_id
                    ),
                )
            except Exception:  # never raises
                pass
        self.buffer = bytearray()
