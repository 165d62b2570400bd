"""Skip a scheduled ``availableNow`` increment that has nothing new to read, before Spark starts.

The ``check`` task of ``streaming_pipeline`` and ``streaming_kafka`` notes the input as it sees
it (:func:`skip_without_new_files`: the input folder's listing; :func:`skip_without_new_records`:
the topic's end offsets) in this run's XCom ``input_seen``, and skips the run, the reason in its
log, when none of it is new since the last run that succeeded. The ``checkpoints`` task, which
runs only once the query succeeded, records this run's note as what was read
(:func:`record_input_read`; :mod:`statecore.ops.increments` says why that never leaves a file or
record unread).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from airflow.sdk.exceptions import AirflowSkipException

from statecore_airflow.hooks import StatecoreHook
from statecore_airflow.streams import query_run_id

__all__ = [
    "SEEN_KEY",
    "record_input_read",
    "skip_without_new_files",
    "skip_without_new_records",
    "topic_end_offsets",
]

SEEN_KEY = "input_seen"
"""The XCom key of the input the ``check`` task saw."""


def _location(job: str) -> str:
    from statecore.ops.streams import default_checkpoint_location

    return default_checkpoint_location(StatecoreHook().get_config(), job)


def _since(read: Any) -> str:
    return f"since run {read.run_id}" if read is not None else ""


def skip_without_new_files(context: Any, job: str, input_path: str) -> list[str]:
    """Note ``input_path``'s listing in this run's XCom; skip the run when no file in it is new
    or changed since the last run of ``job`` that succeeded. The new files."""
    from statecore.ops.increments import InputRead, input_listing, new_files, read_input_read

    listing = input_listing(input_path)
    read = read_input_read(_location(job))
    new = new_files(listing, read, input_path)
    if read is not None and not new:
        raise AirflowSkipException(
            f"no new input {_since(read)}: its query read all {len(listing)} files at "
            f"{input_path}, nothing to stream"
        )
    seen = InputRead(run_id=query_run_id(context), source=input_path, files=listing)
    context["ti"].xcom_push(key=SEEN_KEY, value=asdict(seen))
    return new


def topic_end_offsets(servers: str, topic: str, timeout_s: float = 30) -> dict[str, int] | None:
    """The end offset of each partition of ``topic`` (``None``: no such topic) at the brokers
    ``servers`` (``host:port[,...]``), as the job's Kafka source reads it (read_uncommitted)."""
    from kafka import KafkaConsumer, TopicPartition

    timeout_ms = int(timeout_s * 1000)
    consumer = KafkaConsumer(
        bootstrap_servers=[s.strip() for s in servers.split(",")],
        allow_auto_create_topics=False,
        enable_auto_commit=False,
        request_timeout_ms=timeout_ms,
    )
    try:
        partitions = consumer.partitions_for_topic(topic)
        if not partitions:
            return None
        ends = consumer.end_offsets([TopicPartition(topic, p) for p in sorted(partitions)])
    finally:
        consumer.close()
    return {str(tp.partition): int(offset) for tp, offset in ends.items()}


def skip_without_new_records(context: Any, job: str, servers: str, topic: str) -> dict[str, int]:
    """Note ``topic``'s end offsets in this run's XCom; skip the run when the topic is not there
    or no partition has a record past what the last run of ``job`` that succeeded had seen.
    The partitions with new records and their end offsets."""
    from statecore.ops.increments import InputRead, new_offsets, read_input_read

    end = topic_end_offsets(servers, topic)
    if end is None:
        raise AirflowSkipException(
            f"no input at {servers}: no topic {topic!r} (yet), nothing to read"
        )
    source = f"{servers}/{topic}"
    read = read_input_read(_location(job))
    new = new_offsets(end, read, source)
    if read is not None and not new:
        raise AirflowSkipException(
            f"no new input {_since(read)}: its query read topic {topic!r} up to its end "
            f"offsets {end}, nothing to stream"
        )
    seen = InputRead(run_id=query_run_id(context), source=source, offsets=end)
    context["ti"].xcom_push(key=SEEN_KEY, value=asdict(seen))
    return new


def record_input_read(context: Any, job: str, *, noted_by: str = "check") -> None:
    """Record the input task ``noted_by`` saw in this run as read by ``job``'s query (call once
    the query succeeded)."""
    from statecore.ops.increments import InputRead
    from statecore.ops.increments import record_input_read as record

    seen = context["ti"].xcom_pull(task_ids=noted_by, key=SEEN_KEY)  # this run's only
    if seen:
        record(_location(job), InputRead(**seen))
