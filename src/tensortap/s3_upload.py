"""Old home of the S3 multipart writer, kept for old imports: it lives in
:mod:`tensortap.storage.s3_upload`."""

from tensortap.storage.s3_upload import S3Upload

__all__ = ["S3Upload"]
