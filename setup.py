"""The package's layout in a wheel; every other setting is in pyproject.toml.

The shipped configs and data are top-level folders of the checkout (``conf/``, ``data/``); a wheel
carries them inside the package, as ``pipeline/conf`` and ``pipeline/data`` (``pipeline.files`` finds
them in either place). pyproject.toml's package discovery cannot map a folder from outside
``pipeline/`` into it, hence this file.
"""

from pathlib import Path

from setuptools import find_packages, setup

RESOURCES = {"pipeline.conf": "conf", "pipeline.data": "data"}


def resource_packages(package: str, folder: str) -> list[str]:
    """The folder and its subfolders whose names Python could import, as packages without code: listed,
    so that setuptools does not warn that it would leave them out (their files are the folder's data)."""
    subfolders = (p.relative_to(folder).parts for p in sorted(Path(folder).rglob("*")) if p.is_dir())
    names = [".".join(parts) for parts in subfolders if all(part.isidentifier() for part in parts)]
    return [package, *(f"{package}.{name}" for name in names if "__pycache__" not in name)]


setup(
    packages=[
        *find_packages(include=["pipeline", "pipeline.*"]),
        *(name for package, folder in RESOURCES.items() for name in resource_packages(package, folder)),
    ],
    package_dir=RESOURCES,
    package_data={package: ["**/*"] for package in RESOURCES},
)
