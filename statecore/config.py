"""One configuration object, resolved from arguments, environment, a config file, then defaults.

Order (first wins): explicit arguments, the environment (``STATECORE_HOME``,
``STATECORE_CATALOG_URL``, ``STATECORE_WAREHOUSE``), the TOML file named by ``STATECORE_CONFIG``
(default ``<home>/statecore.toml``), then the embedded, local defaults:

>>> cfg = StatecoreConfig.resolve(home="/tmp/sc", env={})
>>> cfg.catalog_url
'sqlite:////tmp/sc/catalog.db'
>>> cfg.warehouse
'/tmp/sc/warehouse'
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from statecore.errors import ConfigError

__all__ = ["StatecoreConfig"]

_KEYS = ("home", "catalog_url", "warehouse")


@dataclass(frozen=True, kw_only=True)
class StatecoreConfig:
    """Where statecore keeps its catalog and its Delta tables."""

    home: str
    catalog_url: str
    warehouse: str

    def __post_init__(self) -> None:
        for key in _KEYS:
            if not getattr(self, key):
                raise ConfigError(f"statecore config: {key} must not be empty")
        if "://" not in self.catalog_url:
            raise ConfigError(
                f"statecore config: catalog_url {self.catalog_url!r} is not a SQLAlchemy URL "
                "(e.g. sqlite:///path/catalog.db or postgresql+psycopg2://host/db)"
            )

    @classmethod
    def resolve(
        cls,
        *,
        home: str | None = None,
        catalog_url: str | None = None,
        warehouse: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> StatecoreConfig:
        """Resolve the configuration: arguments, then environment, then file, then defaults."""
        env = os.environ if env is None else env
        args = {"home": home, "catalog_url": catalog_url, "warehouse": warehouse}
        from_env = {
            "home": env.get("STATECORE_HOME"),
            "catalog_url": env.get("STATECORE_CATALOG_URL"),
            "warehouse": env.get("STATECORE_WAREHOUSE"),
        }
        resolved_home = args["home"] or from_env["home"] or ".statecore"
        home_path = Path(resolved_home).absolute()
        from_file = _read_file(Path(env.get("STATECORE_CONFIG") or home_path / "statecore.toml"))
        values: dict[str, str] = {"home": str(home_path)}
        defaults = {
            "catalog_url": f"sqlite:///{home_path / 'catalog.db'}",
            "warehouse": str(home_path / "warehouse"),
        }
        for key in ("catalog_url", "warehouse"):
            values[key] = args[key] or from_env[key] or from_file.get(key) or defaults[key]
        return cls(**values)


def _read_file(path: Path) -> dict[str, str]:
    if not path.is_file():
        return {}
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"statecore config file {path} cannot be read: {exc}") from exc
    section = data.get("statecore", data)
    unknown = set(section) - set(_KEYS)
    if unknown:
        raise ConfigError(f"statecore config file {path}: unknown keys {sorted(unknown)}")
    return {k: str(v) for k, v in section.items()}
