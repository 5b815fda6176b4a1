"""A converted checkpoint's tokenizer loaded in its fast form, once it is known to be the same tokenizer.

transformers loads a tokenizer whose class rebuilds its backend from a vocabulary (Gemma's
``GemmaTokenizer``) by parsing ``tokenizer.json`` in Python twice and building the backend anew from
its vocabulary and merges: 5.4 s for Gemma 3's 262k entries on 2 cores, the largest part of
`make keytokens`' start-up after the imports. The same tokenizer (its class, and its backend read from
``tokenizer.json`` by ``tokenizers`` itself) takes a second (``fast_form``).

That the two are the same is checked, never assumed: the first load of a folder loads it both ways and
compares their whole state (``state``: the class, the backend's full serialisation, every attribute).
The verdict is kept in the pipeline's cache folder (``tokenizers/<key>.json``) under a key made of the
sha256 of every file the load may read (all the folder's files but the weights and the pipeline's own
records), the transformers and tokenizers versions and this module's ``FORM``: a fact about those exact
files, found only under their key, as the weights' hash records are. Where the verdict says the same,
later loads take the fast form; anywhere else (no verdict, a different state, another library version,
a changed file) transformers' own load runs, as before. What identifies the model in the records (the
GGUF file's sha256, which fixes these files) is unchanged.
"""

from __future__ import annotations

import contextlib
import json
from importlib import metadata
from pathlib import Path
from typing import Any

from pipeline.files import write_json_atomic
from pipeline.models.identity import WEIGHT_SUFFIXES
from pipeline.provenance import file_sha256, json_sha256

FORM = 1  # the fast form's construction; a change to it keys every verdict anew
FOLDER = "tokenizers"  # <cache>/tokenizers/<key>.json: the verdicts
RECORDS = "longppl-"  # the pipeline's own records in a converted checkpoint's folder, never read by a load
# GemmaTokenizer's copies of the vocabulary and merges it built its backend from: the backend's
# serialisation (compared) holds both, and nothing reads them after it is built (transformers 5.23).
BUILD_INPUTS = ("_tokenizer", "_vocab", "_merges")


def load_tokenizer(folder: Path, cache_dir: Path) -> Any:
    """The tokenizer of ``folder`` (a converted checkpoint): its fast form where a verdict says it is
    the same tokenizer, else transformers' load (compared with the fast form once, the verdict kept)."""
    from transformers import AutoTokenizer

    verdict = cache_dir / FOLDER / f"{form_key(folder)}.json"
    if same_recorded(verdict):
        with contextlib.suppress(Exception):  # a form that no longer builds: transformers' load decides
            return fast_form(folder)
    slow = AutoTokenizer.from_pretrained(str(folder))
    try:
        same = state(fast_form(folder)) == state(slow)
    except Exception:  # a form that does not build (another transformers): not the same
        same = False
    record = {"same": same, "class": type(slow).__name__, "folder": folder.name}
    with contextlib.suppress(OSError):  # a cache folder that cannot be written: the next load compares again
        write_json_atomic(verdict, record)
    return slow


def same_recorded(verdict: Path) -> bool:
    try:
        return json.loads(verdict.read_text(encoding="utf-8")).get("same") is True
    except (OSError, ValueError, AttributeError):
        return False


def form_key(folder: Path) -> str:
    """The key of a verdict: every file a load of ``folder`` may read (sha256), the libraries' versions
    and ``FORM``."""
    files = {
        p.name: file_sha256(p)
        for p in sorted(folder.iterdir())
        if p.is_file() and p.suffix not in WEIGHT_SUFFIXES and not p.name.startswith(RECORDS)
    }
    versions = {name: metadata.version(name) for name in ("transformers", "tokenizers")}
    return json_sha256({"form": FORM, "versions": versions, "files": files})


def fast_form(folder: Path) -> Any:
    """The tokenizer transformers would load from ``folder``, built from ``tokenizer.json`` read by
    ``tokenizers``: its class (from ``tokenizer_config.json``) without the constructor that rebuilds the
    backend, the settings ``tokenizer_config.json`` holds and the added tokens the backend holds, as
    transformers hands them to that constructor."""
    from huggingface_hub import is_offline_mode
    from tokenizers import Tokenizer
    from transformers.models.auto.tokenization_auto import tokenizer_class_from_name
    from transformers.tokenization_utils_tokenizers import TokenizersBackend

    settings = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    cls = tokenizer_class_from_name(settings.pop("tokenizer_class", None) or "TokenizersBackend")
    if cls is None or not issubclass(cls, TokenizersBackend):
        raise ValueError(f"{folder}: no fast tokenizer class")
    for name in ("add_bos_token", "add_eos_token"):  # transformers drops them beside a tokenizer.json
        settings.pop(name, None)
    template = folder / "chat_template.jinja"
    if template.is_file():
        settings["chat_template"] = template.read_text(encoding="utf-8")
    tokenizer = cls.__new__(cls)
    tokenizer._tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    added = tokenizer._tokenizer.get_added_tokens_decoder()
    by_text = {str(token): token for token in added.values()}
    for name in cls.SPECIAL_TOKENS_ATTRIBUTES:
        if settings.get(name) is not None:
            settings[name] = by_text.get(str(settings[name]), settings[name])
    for name, file in cls.vocab_files_names.items():  # the backend is read: no tokenizer_file to read again
        if name != "tokenizer_file":
            settings[name] = str(folder / file) if (folder / file).is_file() else None
    settings |= {"added_tokens_decoder": added, "name_or_path": str(folder), "is_local": True}
    settings["local_files_only"] = is_offline_mode()  # as from_pretrained sets it
    TokenizersBackend.__init__(tokenizer, **settings)
    return tokenizer


def state(tokenizer: Any) -> dict[str, Any]:
    """All that makes a tokenizer what it is: its class, its backend's full serialisation (vocabulary,
    merges, normaliser, pre-tokeniser, post-processor, decoder, added tokens, padding, truncation) and
    every attribute but the backend's build inputs (``BUILD_INPUTS``)."""
    found = {
        "class": f"{type(tokenizer).__module__}.{type(tokenizer).__qualname__}",
        "backend": tokenizer.backend_tokenizer.to_str(),
    }
    found |= {k: plain(v) for k, v in tokenizer.__dict__.items() if k not in BUILD_INPUTS}
    return found


def plain(value: Any) -> Any:
    """A value as comparable data: mappings by sorted key, sequences item by item, the rest as its repr
    (an added token's repr holds every flag)."""
    if isinstance(value, dict):
        return sorted((str(k), plain(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return repr(value)
