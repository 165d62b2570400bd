"""Registers the statecore page (:class:`statecore_airflow.plugin.StatecorePlugin`) from the
plugins folder: the one file of it the plugin manager loads (``.airflowignore`` keeps it out of
``statecore_airflow/``).

Not an ``airflow.plugins`` entry point: an editable install (``make setup``) is seen twice by
``importlib.metadata`` from the project folder (its ``statecore.egg-info`` and the venv's
dist-info), and Airflow then reports the second registration as an import error."""

from __future__ import annotations

from statecore_airflow.plugin import StatecorePlugin

__all__ = ["StatecorePlugin"]
