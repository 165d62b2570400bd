"""PyFlink's ``SimpleStringSchema`` and ``Encoder`` (``pyflink.common.serialization``): a Kafka
record's value as a UTF-8 string, and a file sink's line as the element's string (as Flink's
``SimpleStringEncoder`` writes ``toString()``, see
:func:`~statecore.pyflink.datastream.formatting.flink_string`)."""

from __future__ import annotations

__all__ = ["Encoder", "SimpleStringSchema"]


class SimpleStringSchema:
    """A record's bytes as a string (``charset``, UTF-8 by default)."""

    def __init__(self, charset: str = "UTF-8") -> None:
        self.charset = charset


class Encoder:
    """How a row-format file sink writes an element: one line of its string."""

    def __init__(self, charset: str = "UTF-8") -> None:
        self.charset = charset

    @staticmethod
    def simple_string_encoder(charset_name: str = "UTF-8") -> Encoder:
        return Encoder(charset_name)
