"""What a load of a cached GGUF conversion reads: a private view of exactly the files its record names.

transformers reads whatever a checkpoint folder holds under the names it knows (``added_tokens.json``,
``special_tokens_map.json``, ``chat_template.jinja``, ``additional_chat_templates/``, ...), so the
conversion's own folder is never handed to it: ``recorded_view`` checks the folder
(``pipeline.models.gguf.recorded_files``: the record is this GGUF file's and names every file the folder
holds), then makes a private folder (a staging folder of the cache, held by a lock and removed after;
in a cache this process cannot write, another user's, a temporary folder of the system's) holding
copies of the recorded small files, checked as copied, and links to the recorded weights, checked by
``check_weights`` and unchanged until the load ends. A file that appears in the conversion after its
check is not read either, and a failure to read the checked files (a record re-sealed over an edited
file) is one line naming the conversion (``load_errors``)."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import torch

from pipeline.errors import PipelineError
from pipeline.models.gguf import (
    SOURCE_RECORD,
    Recorded,
    check_weights,
    damaged,
    recorded_files,
    staging_folder,
)
from pipeline.models.weight_hashes import file_version
from pipeline.provenance import file_sha256


@contextlib.contextmanager
def recorded_view(target: Path, gguf_sha256: str, weights: bool = True) -> Iterator[Path]:
    """A private folder holding exactly the files ``target``'s record names, for transformers to load
    from (``fill_view``), the weights (unless ``weights`` is False) unchanged until the block ends; a
    file added to the conversion is never read. A failure to read the checked files (a record re-sealed
    over an edited file) is one line naming the conversion."""
    entries = recorded_files(target, gguf_sha256)
    linked = {e.name: e.sha256 for e in entries if e.weights and weights}
    with contextlib.ExitStack() as folders:
        try:
            staging = folders.enter_context(staging_folder(target.parent))
        except OSError:  # a cache this process cannot write (another user's): the system's temporary folder
            staging = Path(folders.enter_context(tempfile.TemporaryDirectory(prefix="longppl-view-")))
        view = fill_view(target, staging / target.name, [e for e in entries if not e.weights], linked)
        check_weights(target, linked)
        versions = {name: stat_version(target / name) for name in linked}
        with load_errors(target, view):
            yield view
        if changed := [name for name, version in versions.items() if stat_version(target / name) != version]:
            raise PipelineError(f"{damaged(target)}: {changed[0]} changed while it was loaded")


def fill_view(target: Path, view: Path, copied: list[Recorded], linked: dict[str, str]) -> Path:
    """``view`` made of ``target``'s files: ``copied`` copied and checked as copied (what is read is what
    was checked), ``linked`` (the weights, checked by ``check_weights``) linked to."""
    for name in [entry.name for entry in copied] + list(linked):
        (view / name).parent.mkdir(parents=True, exist_ok=True)
    for entry in copied:
        shutil.copyfile(target / entry.name, view / entry.name)
        if file_sha256(view / entry.name) != entry.sha256:
            raise PipelineError(f"{damaged(target)}: {entry.name} is not the file written when it was made")
    for name in linked:
        (view / name).symlink_to((target / name).absolute())
    return view


def stat_version(path: Path) -> str | None:
    """``file_version`` of ``path``, None where it is gone."""
    try:
        return file_version(path)
    except OSError:
        return None


@contextlib.contextmanager
def load_errors(target: Path, view: Path) -> Iterator[None]:
    """What reading a checked conversion (through its ``view``) raises, tokenizers' and safetensors' own
    exceptions among them, as one line naming it; the pipeline's errors, a package that is missing
    (``attn_implementation=flash_attention_2`` without flash-attn) and running out of memory as they
    are."""
    try:
        yield
    except (PipelineError, ImportError, MemoryError, torch.OutOfMemoryError):
        raise
    except Exception as exc:
        detail = " ".join(str(exc).replace(str(view), str(target)).split())[:300] or type(exc).__name__
        raise PipelineError(
            f"the cached GGUF conversion {target} does not load ({type(exc).__name__}: {detail}), though "
            f"its files are those its {SOURCE_RECORD} names: the record was rewritten over edited files "
            "(or this transformers does not read what an older one wrote); delete that folder (the next "
            "load makes it anew)"
        ) from exc
