"""The artifact against the inputs it was made from, where they are at hand: the evaluator's tokenizer
and the source texts (``check_against_inputs``, run on every load that verifies hashes).

The content checks (``pipeline.artifact.checks``) prove what the tables say about each other; these
prove what they say about the world:

- the evaluator's tokenizer, when this machine has exactly the one stage 1 used (an embedded or GGUF
  evaluator's cached conversion, keyed by the file's sha256; a Hub evaluator's files at the recorded
  commit in the local Hub cache; never a local folder, which a path does not identify) under the
  transformers version the fingerprinted settings record: re-tokenising each stored text must give
  the stored token ids and character offsets (``Retokeniser``: first with the fast tokenizer's own
  ``tokenizer.json``, a second to load; as transformers loads it, as stage 1 did, several seconds for
  a large vocabulary, only where the first disagrees);
- the source texts, when the corpus is a local file that still holds them (found by their sha256):
  a truncated text must be a prefix of its source, and with the tokenizer at hand, exactly the prefix
  that stage 1 cuts at ``max_tokens`` (``pipeline.text.tokenization.encode_truncated``).

What was checked, or why not, is returned (``KeyTokenArtifact.checked``; results record it). A complete
check (the tokenizer at hand, every truncated text's source found) is remembered under the artifact's
fingerprint and contents hash (``VERIFIED``, in the pipeline's cache folder): a fact about those exact
tables, so later loads skip the seconds that loading a large tokenizer takes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.artifact.checks import FIX, ArtifactProblem
from pipeline.artifact.schema import KeyTokenArtifact
from pipeline.errors import PipelineError
from pipeline.files import locate_input, write_json_atomic
from pipeline.models.conversion_view import recorded_view
from pipeline.models.gguf import SOURCE_RECORD, default_cache_dir, gguf_cache_path
from pipeline.models.sources import EMBEDDED_MODELS
from pipeline.provenance import json_sha256
from pipeline.text.corpus import CorpusSpec, load_corpus
from pipeline.text.tokenization import Encoding, encode_truncated, encode_with_offsets

VERIFIED = "verified"  # <cache>/verified/<sha256 of fingerprint and contents>.json
RETOKENISED = "re-tokenised with "
UNAVAILABLE = "not at hand"


def check_against_inputs(artifact: KeyTokenArtifact) -> dict[str, str]:
    """Re-tokenise the stored texts and compare them with their sources, where those are at hand
    (or recall that this was done); raises ArtifactProblem at the first difference. Returns what was
    checked (``tokenizer``, ``sources``), in words."""
    remembered = verified_record(artifact)
    try:
        checked = json.loads(remembered.read_text(encoding="utf-8"))["checked"]
        if isinstance(checked, dict) and all(isinstance(v, str) for v in checked.values()):
            return checked
    except (OSError, ValueError, KeyError, TypeError):
        pass
    checked, complete = check_now(artifact)
    if complete:  # a read-only cache only costs the next load the same seconds
        with contextlib.suppress(OSError):
            write_json_atomic(remembered, {"checked": checked, "root": str(artifact.root)})
    return checked


def verified_record(artifact: KeyTokenArtifact) -> Path:
    key = json_sha256({"fingerprint": artifact.manifest["fingerprint"], "contents": artifact.contents})
    return default_cache_dir() / VERIFIED / f"{key}.json"


def check_now(artifact: KeyTokenArtifact) -> tuple[dict[str, str], bool]:
    """The checks, and whether they were complete (every input at hand)."""
    docs = artifact.documents.to_pydict()
    n_truncated = sum(docs["truncated"])
    sources = source_texts(artifact.settings) if n_truncated else "no text is truncated"
    tokenizer: Retokeniser | str = "key spans only: no tokens to compare"
    found = 0
    starts = np.concatenate([[0], np.cumsum(docs["n_tokens"])])
    with contextlib.ExitStack() as views:  # a conversion's tokenizer is read from a view of its files
        if artifact.tokens is not None:
            tokenizer = evaluator_tokenizer(artifact.settings, views)
        for i, text in enumerate(docs["text"]):
            source = sources.get(docs["source_sha256"][i]) if isinstance(sources, dict) else None
            found += source is not None and docs["truncated"][i]
            where = f"artifact {artifact.root}: document '{docs['doc_id'][i]}'"
            if source is not None:
                check_source(where, text, source, docs["n_source_chars"][i])
            if isinstance(tokenizer, Retokeniser):
                rows = (int(starts[i]), artifact.tokens.slice(int(starts[i]), int(starts[i + 1] - starts[i])))
                tokenizer = tokenizer.check(
                    where, text, source, docs["truncated"][i], artifact.settings, rows
                )
    if isinstance(sources, dict):
        sources = f"{found} of {n_truncated} truncated texts found in their source"
    checked_tokens = tokenizer.done if isinstance(tokenizer, Retokeniser) else tokenizer
    complete = not (checked_tokens.startswith(UNAVAILABLE) or sources.startswith(UNAVAILABLE))
    return {"tokenizer": checked_tokens, "sources": sources}, complete and found == n_truncated


def evaluator_tokenizer(settings: dict[str, Any], views: contextlib.ExitStack) -> Retokeniser | str:
    """The evaluator's tokenizer exactly as stage 1 loaded it, or why it is not at hand; a cached
    conversion's is read from a view of exactly its recorded files, open until ``views`` closes."""
    evaluator = settings["evaluator"]
    made_with = (settings.get("libraries") or {}).get("transformers")
    here = metadata.version("transformers")
    if made_with != here:
        return f"{UNAVAILABLE}: made with transformers {made_with}, this is {here}"
    kind, spec = evaluator.get("kind"), evaluator["spec"]
    if kind in ("embedded", "gguf") and isinstance(evaluator.get("file_sha256"), str):
        name = EMBEDDED_MODELS[spec].filename if kind == "embedded" and spec in EMBEDDED_MODELS else None
        target = converted_checkpoint(name or Path(str(evaluator.get("path"))).name, evaluator["file_sha256"])
        if target is None:
            return f"{UNAVAILABLE}: no cached conversion of {spec} on this machine"
        folder = views.enter_context(recorded_view(target, evaluator["file_sha256"], weights=False))
        return Retokeniser(spec, str(folder), {}, folder / "tokenizer.json")
    if kind == "hub" and isinstance(evaluator.get("revision"), str):
        from huggingface_hub import try_to_load_from_cache

        options = {"revision": evaluator["revision"], "local_files_only": True}
        cached = try_to_load_from_cache(spec, "tokenizer.json", revision=evaluator["revision"])
        return Retokeniser(spec, spec, options, Path(cached) if isinstance(cached, str) else None)
    return f"{UNAVAILABLE}: a {kind} evaluator is not identified by its location"


class TokenizerUnavailable(Exception):
    """The evaluator's tokenizer would not load (``Retokeniser.full``)."""


@dataclass
class Retokeniser:
    """The evaluator's tokenizer, two ways to the same tokens: its fast tokenizer's own file (``file``,
    read by ``tokenizers``) and as transformers loads it (``location`` with ``options``), as stage 1
    did. A document's stored tokens pass when either gives them; the second, slow to load for a large
    vocabulary, is loaded only when the first disagrees, and decides."""

    spec: str
    location: str
    options: dict[str, Any]
    file: Path | None
    loaded: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def done(self) -> str:
        return f"{RETOKENISED}{self.spec}'s tokenizer"

    def check(
        self,
        where: str,
        text: str,
        source: str | None,
        truncated: bool,
        settings: dict[str, Any],
        rows: tuple[int, Any],
    ) -> Retokeniser | str:
        """Raise if neither way gives the stored tokens ``rows`` (first row number, table) of ``text``;
        returns itself, or why the tokenizer is not at hand."""
        problem = None
        for encode in self.encoders():
            try:
                encoding = retokenised(where, encode, text, source, settings, truncated)
            except TokenizerUnavailable as exc:
                return f"{UNAVAILABLE}: {exc}"
            problem = encoding if isinstance(encoding, str) else token_problem(where, encoding, *rows)
            if problem is None:
                return self
        raise ArtifactProblem(problem)

    def encoders(self) -> Iterator[Callable[[str], Encoding]]:
        if self.raw() is not None:
            yield lambda text: raw_encoding(self.raw(), text)
        yield lambda text: encode_with_offsets(self.full(), text)

    def raw(self) -> Any:
        if "raw" not in self.loaded:
            from tokenizers import Tokenizer

            try:
                self.loaded["raw"] = Tokenizer.from_file(str(self.file)) if self.file else None
            except Exception:  # no such file, or one tokenizers cannot read: transformers decides
                self.loaded["raw"] = None
        return self.loaded["raw"]

    def full(self) -> Any:
        if "full" not in self.loaded:
            from transformers import AutoTokenizer

            try:
                self.loaded["full"] = AutoTokenizer.from_pretrained(self.location, **self.options)
            except Exception as exc:  # not cached, remote code, a broken file: all mean "not at hand"
                raise TokenizerUnavailable(f"{type(exc).__name__} loading {self.spec}'s tokenizer") from None
        return self.loaded["full"]


def raw_encoding(tokenizer: Any, text: str) -> Encoding:
    """``text``'s tokens and character offsets from a ``tokenizers.Tokenizer``, without special tokens."""
    found = tokenizer.encode(text, add_special_tokens=False)
    offsets = np.asarray(found.offsets, dtype=np.int64).reshape(-1, 2)
    return Encoding(ids=np.asarray(found.ids, dtype=np.int64), offsets=offsets, offsets_from="tokenizer")


def converted_checkpoint(gguf_name: str, sha: str) -> Path | None:
    """This machine's cached conversion of the GGUF file named ``gguf_name`` whose sha256 is ``sha``, or
    None; its files are checked when its view is made (``recorded_view``: one that holds another file,
    or whose files changed since it was made, is an error that names it, not a tokenizer that would
    blame the artifact)."""
    target = gguf_cache_path(Path(gguf_name), sha, default_cache_dir())
    return target if (target / SOURCE_RECORD).is_file() else None


def source_texts(settings: dict[str, Any]) -> dict[str, str] | str:
    """The texts of the source corpus by sha256, when it is a local file; else why not."""
    corpus = settings.get("corpus") or {}
    path = corpus.get("path")
    if not isinstance(path, str) or not locate_input(path).is_file():
        return f"{UNAVAILABLE}: the corpus is not a local file here"
    field = corpus.get("text_field")
    spec = CorpusSpec(name=corpus["name"], path=path, text_field=field if isinstance(field, str) else "text")
    try:
        docs = load_corpus(dataclasses.replace(spec, id_field=None), [])  # texts found by their hash
    except (PipelineError, OSError, ValueError) as exc:
        return f"{UNAVAILABLE}: {path} does not read ({type(exc).__name__})"
    return {doc.sha256: doc.text for doc in docs}


def check_source(where: str, text: str, source: str, n_source_chars: int) -> None:
    if len(source) != n_source_chars:
        raise ArtifactProblem(
            f"{where}: n_source_chars is {n_source_chars}, its source text has {len(source)} "
            f"characters; {FIX}"
        )
    if not source.startswith(text):
        at = next((i for i, (a, b) in enumerate(zip(text, source, strict=False)) if a != b), len(source))
        raise ArtifactProblem(f"{where}: the text differs from its source at character {at}; {FIX}")


def retokenised(
    where: str,
    encode: Callable[[str], Encoding],
    text: str,
    source: str | None,
    settings: dict[str, Any],
    truncated: bool,
) -> Encoding | str:
    """The stored text's tokens as stage 1 makes them: from its source when at hand (which proves the
    cut), else from the stored text; or what differs from the artifact."""
    try:
        if source is None:
            return encode(text)
        kept, encoding, cut = encode_truncated(None, source, settings.get("max_tokens"), encode)
    except PipelineError as exc:
        return f"{where}: the evaluator's tokenizer does not take its text back ({exc}); {FIX}"
    if kept != text or cut != truncated:
        return (
            f"{where}: stage 1 keeps {len(kept)} characters of its source (max_tokens="
            f"{settings.get('max_tokens')}), the artifact {len(text)}; {FIX}"
        )
    return encoding


def token_problem(where: str, encoding: Encoding, first_row: int, rows: Any) -> str | None:
    """How the stored token ids and offsets (``rows`` of tokens.parquet, from row ``first_row``) differ
    from a fresh encoding."""
    stored = {c: rows[c].to_numpy() for c in ("token_id", "char_start", "char_end")}
    fresh = {
        "token_id": encoding.ids,
        "char_start": encoding.offsets[:, 0],
        "char_end": encoding.offsets[:, 1],
    }
    if len(encoding.ids) != rows.num_rows:
        return (
            f"{where}: re-tokenising its text with the evaluator's tokenizer gives {len(encoding.ids)} "
            f"tokens, tokens.parquet holds {rows.num_rows}; {FIX}"
        )
    first = {c: np.flatnonzero(v != fresh[c])[:1] for c, v in stored.items()}
    column = min((c for c in first if first[c].size), key=lambda c: first[c][0], default=None)
    if column is None:
        return None
    at = int(first[column][0])
    return (
        f"{where}: tokens.parquet row {first_row + at}, column {column} is {stored[column][at]}, "
        f"re-tokenising the text with the evaluator's tokenizer gives {fresh[column][at]}; {FIX}"
    )
