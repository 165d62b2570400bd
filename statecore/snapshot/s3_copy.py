"""Server-side copies on one S3 endpoint: ``CopyObject``, and a multipart copy
(``UploadPartCopy``) for an object over S3's 5 GB limit of one ``CopyObject``. No byte passes
through this process: S3 copies within itself. And :func:`put_if_absent`, the conditional put
with which statecore writes a state table's incremental commit (:mod:`.log_commit`).

``boto3`` is used only here: pyarrow's filesystem copies with one ``CopyObject`` (which S3
refuses above 5 GB) and has no multipart copy. The client has this process's S3 settings
(:class:`~statecore.snapshot.storage.S3Settings`: credentials, region, endpoint) and retries
as every other statecore client does: botocore's standard mode (exponential backoff with
jitter; ``503 SlowDown`` is one of its throttling errors), up to ``STATECORE_S3_MAX_ATTEMPTS``
attempts of one request. Every failure is raised as :class:`OSError`, as pyarrow's are, with
botocore's message (which names ``SlowDown`` for throttling:
:func:`~statecore.snapshot.storage.throttling_hint`).
"""

from __future__ import annotations

import functools
from typing import Any

from statecore.snapshot.storage import S3Settings

__all__ = [
    "COPY_PART_SIZE",
    "MAX_COPY_OBJECT",
    "copy_object",
    "s3_client",
    "split_uri",
]

MAX_COPY_OBJECT = 5 * 1024**3
"""The largest object one ``CopyObject`` copies (S3's limit, 5 GB)."""

COPY_PART_SIZE = 512 * 1024**2
"""The part size of a multipart copy: S3 takes 5 MB to 5 GB a part and 10,000 parts, so 512 MB
parts copy objects up to 5 TB (S3's largest) in at most 10,000 requests."""


@functools.lru_cache(maxsize=8)
def s3_client(settings: S3Settings, connections: int) -> Any:
    """A boto3 S3 client with ``settings`` and a pool of ``connections`` (clients are thread-safe;
    one per process, settings and pool size)."""
    import boto3
    from botocore.config import Config

    kwargs: dict[str, Any] = {"region_name": settings.region}
    if settings.access_key_id and settings.secret_access_key:
        kwargs.update(
            aws_access_key_id=settings.access_key_id,
            aws_secret_access_key=settings.secret_access_key,
            aws_session_token=settings.session_token,
        )
    if settings.endpoint_url:
        kwargs["endpoint_url"] = settings.endpoint_url
    config = Config(
        retries={"mode": "standard", "total_max_attempts": settings.max_attempts},
        max_pool_connections=max(1, connections),
    )
    return boto3.session.Session().client("s3", config=config, **kwargs)


def split_uri(uri: str) -> tuple[str, str]:
    """``(bucket, key)`` of ``s3://bucket/key`` (or ``s3a://``)."""
    bucket, _, key = uri.split("://", 1)[1].partition("/")
    return bucket, key


def copy_object(
    client: Any,
    source: str,
    target: str,
    size: int,
    *,
    part_size: int = COPY_PART_SIZE,
    max_single: int = MAX_COPY_OBJECT,
) -> None:
    """Copy the object ``source`` (``s3://bucket/key``, of ``size`` bytes) to ``target`` on
    the server: one ``CopyObject`` up to ``max_single`` bytes, else a multipart upload of
    ``UploadPartCopy`` parts of ``part_size`` bytes (aborted if a part fails). :class:`OSError`
    when S3 refuses (a missing source, a range past its end, throttling through every
    attempt)."""
    from botocore.exceptions import BotoCoreError, ClientError

    source_bucket, source_key = split_uri(source)
    bucket, key = split_uri(target)
    copy_source = {"Bucket": source_bucket, "Key": source_key}
    try:
        if size <= max_single:
            client.copy_object(Bucket=bucket, Key=key, CopySource=copy_source)
            return
        upload = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
        try:
            parts = []
            for number, start in enumerate(range(0, size, part_size), 1):
                end = min(start + part_size, size) - 1
                answer = client.upload_part_copy(
                    Bucket=bucket,
                    Key=key,
                    UploadId=upload,
                    PartNumber=number,
                    CopySource=copy_source,
                    CopySourceRange=f"bytes={start}-{end}",
                )
                parts.append({"PartNumber": number, "ETag": answer["CopyPartResult"]["ETag"]})
            client.complete_multipart_upload(
                Bucket=bucket, Key=key, UploadId=upload, MultipartUpload={"Parts": parts}
            )
        except BaseException:
            try:
                client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload)
            except (BotoCoreError, ClientError):
                pass  # S3's lifecycle rules reclaim an upload left incomplete
            raise
    except (BotoCoreError, ClientError) as exc:
        raise OSError(f"S3 copy of {source} to {target} failed: {exc}") from exc


def put_if_absent(client: Any, target: str, body: bytes) -> bool:
    """Write ``body`` to ``target`` (``s3://bucket/key``) only if no object is there
    (``If-None-Match: *``, as delta-rs writes its commit files); whether it was written.
    :class:`OSError` when S3 refuses otherwise (throttling through every attempt)."""
    from botocore.exceptions import BotoCoreError, ClientError

    bucket, key = split_uri(target)
    try:
        client.put_object(Bucket=bucket, Key=key, Body=body, IfNoneMatch="*")
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if code in ("PreconditionFailed", "ConditionalRequestConflict") or status in (409, 412):
            return False
        raise OSError(f"S3 put of {target} failed: {exc}") from exc
    except BotoCoreError as exc:
        raise OSError(f"S3 put of {target} failed: {exc}") from exc
    return True
