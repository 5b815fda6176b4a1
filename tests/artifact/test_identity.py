"""An artifact's two identities (``pipeline.artifact.identity``): the exact contents, and *the same
artifact* regenerated elsewhere (discrete contents equal, values within the measured tolerance). A
regeneration whose floats differ in their last bits is the same artifact for the refresh, the
leaderboard and the results files; a moved key span, another token or values beyond the tolerance are
not, and the documents are named."""

from __future__ import annotations

import json
import math

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.artifact.identity import (
    Identity,
    compare_tables,
    differences,
    summarise,
    summary_bounds,
)
from pipeline.artifact.reader import load_artifact
from pipeline.artifact.schema import contents_sha256
from pipeline.commands import compare_artifacts
from pipeline.commands import leaderboard_refresh as refresh_command
from pipeline.errors import PipelineError
from pipeline.reporting import leaderboard
from pipeline.results.entries import other_contents
from pipeline.results.score import RESULTS_VERSION, read_lines, read_scores, same_artifact
from tests.support import (
    cell,
    compose_config,
    compose_keytokens,
    craft,
    first_plain_row,
    key_end_over_the_next_tokens,
    keytokens_overrides,
    remerged,
    run_keytokens,
    score,
)


def jittered(scale: float, seed: int = 0, only_doc: str | None = None):
    """A tokens edit: every log-prob lowered by up to ``scale`` (short = long kept bit for bit where
    they were equal, as the first window's are), LSD and soft weights recomputed, key flags unchanged
    (asserted): a regeneration whose floats were summed in another order."""

    def edit(df: pl.DataFrame) -> pl.DataFrame:
        rng = np.random.default_rng(seed)
        chosen = np.ones(df.height, bool) if only_doc is None else (df["doc_id"] == only_doc).to_numpy()
        long = df["long_logprob"].to_numpy().astype(float)
        short = df["short_logprob"].to_numpy().astype(float)
        u, v = (rng.uniform(0, scale, df.height) * chosen for _ in range(2))
        same = long == short
        new_long, new_short = long - u, np.where(same, short - u, short - v)
        lsd = new_long - new_short
        out = df.with_columns(
            long_logprob=pl.Series(new_long, nan_to_null=True),
            short_logprob=pl.Series(new_short, nan_to_null=True),
            lsd=pl.Series(lsd, nan_to_null=True),
            soft_weight=pl.Series(np.minimum(np.exp(lsd), 5.0), nan_to_null=True),
        )
        return out  # key flags as before: the load's checks apply the rule to the new values

    return edit


@pytest.fixture(scope="module")
def regenerated(tiny_artifact, tmp_path_factory):
    """The tiny artifact with its values moved by a quarter of the tolerance (key flags unchanged)."""
    root = craft(
        tiny_artifact, tmp_path_factory.mktemp("regen") / tiny_artifact.name, tokens=jittered(2.5e-4)
    )
    return root


def test_float_rounding_keeps_the_identity_and_changes_the_exact_contents(tiny_artifact, regenerated):
    genuine, again = load_artifact(tiny_artifact), load_artifact(regenerated)
    assert again.contents != genuine.contents  # the bytes differ
    assert again.identity.discrete == genuine.identity.discrete
    assert differences(again.identity, genuine.identity) == []
    report = compare_tables(genuine, again)
    assert report["documents"] == ["doc-0", "doc-1", "doc-2"] and report["key_flags_differ"] == {}
    assert 0 < report["columns"]["lsd"]["max"] <= 5e-4
    assert report["columns"]["lsd"]["differing"] > 0


def test_a_moved_key_span_is_another_artifact_and_names_its_document(tiny_artifact, tmp_path):
    """The consistent forgery (a plain token made key, spans re-merged) and a key token's end moved over
    the next tokens: the discrete hash differs, and the document is named."""
    genuine = load_artifact(tiny_artifact).identity
    forged = remerged(tiny_artifact, tmp_path / "forged" / tiny_artifact.name, consistent_forgery)
    problems = differences(load_artifact(forged).identity, genuine)
    assert problems[0] == "key tokens or key spans differ in doc-0", problems  # and its forged values
    moved = remerged(tiny_artifact, tmp_path / "moved" / tiny_artifact.name, key_end_over_the_next_tokens())
    from pipeline.artifact.reader import read_manifest, read_table
    from pipeline.artifact.schema import KeyTokenArtifact

    manifest = read_manifest(moved)  # refused on load (offsets): its identity, unchecked
    tables = {n: read_table(moved, n, manifest, True) for n in ("documents", "tokens", "spans")}
    problems = differences(KeyTokenArtifact(moved, manifest, **tables).identity, genuine)
    assert any("key tokens or key spans differ in doc-0" in p for p in problems), problems
    assert any("token ids, offsets or null values differ in doc-0" in p for p in problems), problems


def test_values_beyond_the_tolerance_are_another_artifact(tiny_artifact, tmp_path):
    """One document's values moved by 40x the tolerance, key flags unchanged: named, with the statistic."""
    genuine = load_artifact(tiny_artifact).identity
    root = craft(
        tiny_artifact, tmp_path / "far" / tiny_artifact.name, tokens=jittered(0.04, only_doc="doc-1")
    )
    problems = differences(load_artifact(root).identity, genuine)
    assert len(problems) == 1 and problems[0].startswith("values beyond the tolerance in doc-1 ("), problems
    soft = craft(
        tiny_artifact,
        tmp_path / "soft" / tiny_artifact.name,
        tokens=lambda df: cell("soft_weight", first_plain_row(df), 4.9)(df),
    )
    from pipeline.artifact.reader import read_manifest, read_table
    from pipeline.artifact.schema import KeyTokenArtifact

    manifest = read_manifest(soft)  # a soft weight edited alone: refused on load, and another artifact
    tables = {n: read_table(soft, n, manifest, True) for n in ("documents", "tokens", "spans")}
    problems = differences(KeyTokenArtifact(soft, manifest, **tables).identity, genuine)
    assert problems and "soft_weight" in problems[0] and "doc-0" in problems[0], problems


def test_other_settings_or_documents_are_another_artifact(tiny_artifact):
    genuine = load_artifact(tiny_artifact).identity
    other = Identity("0" * 64, genuine.discrete, genuine.documents, genuine.n_tokens)
    assert differences(other, genuine)[0].startswith("fingerprint 000000000000, expected")
    fewer = Identity(
        genuine.fingerprint, genuine.discrete, dict(list(genuine.documents.items())[:2]), genuine.n_tokens
    )
    assert differences(fewer, genuine) == ["documents doc-0, doc-1, expected doc-0, doc-1, doc-2"]


def test_the_record_reads_back_and_survives_json(tiny_artifact):
    ident = load_artifact(tiny_artifact).identity
    back = Identity.from_record(ident.fingerprint, json.loads(json.dumps(ident.record())))
    assert back == ident and differences(back, ident) == []


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(-30, 0, allow_nan=False) | st.just(math.nan), min_size=1, max_size=300),
    st.integers(0, 2**32 - 1),
    st.floats(1e-9, 1e-2),
)
def test_summaries_stay_within_their_bounds_whenever_every_value_does(values, seed, eps):
    """The bounds are a guarantee: no regeneration within the tolerance is ever refused."""
    x = np.array(values)
    y = x + np.random.default_rng(seed).uniform(-eps, eps, x.size)
    a, b = summarise(pa.array(x, from_pandas=True)), summarise(pa.array(y, from_pandas=True))
    for stat, bound in summary_bounds(eps, x.size).items():
        if a[stat] is None:
            assert b[stat] is None
        else:
            assert abs(a[stat] - b[stat]) <= bound * (1 + 1e-9) + 1e-9, stat


def test_stage1_in_another_summation_order_gives_the_same_artifact(tiny_model_dir, tiny_artifact, tmp_path):
    """Stage 1 in float32 twice, with other head blocks, vocabulary tiles and window batches: the same
    artifact (the exact contents may differ)."""
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_bytes((tiny_artifact.parent / "corpus.jsonl").read_bytes())
    runs = {}
    for name, extra in {
        "a": ["head_chunk=16"],
        "b": ["head_chunk=5", "vocab_tile=37", "window_batch_tokens=24"],
    }.items():
        overrides = keytokens_overrides(tiny_model_dir, corpus, tmp_path / name, "dtype=float32", *extra)
        run_keytokens(compose_keytokens(overrides))
        runs[name] = load_artifact(tmp_path / name / "test")
    assert runs["a"].manifest["fingerprint"] == runs["b"].manifest["fingerprint"]
    assert differences(runs["b"].identity, runs["a"].identity) == []
    assert compare_tables(runs["a"], runs["b"])["key_flags_differ"] == {}


# ----------------------------------------------------------------------------------------------
# Through the refresh, the leaderboard and the compare command


def refresh_overrides(artifact, recorded, model_dir, *extra):
    loaded = load_artifact(artifact)
    return [
        f"artifact={artifact}",
        f"fingerprint={loaded.manifest['fingerprint']}",
        f"discrete={loaded.identity.discrete}",
        "contents=null",
        f"recorded={recorded}",
        f"models=[{{name: tiny, spec: '{model_dir}', revision: null}}]",
        f"work_dir={recorded.parent / 'work'}",
        "settings.dtype=float64",
        "+settings.head_chunk=16",
        *extra,
    ]


def test_a_refresh_reproduces_on_a_regenerated_artifact_and_names_moved_key_spans(
    tiny_artifact, regenerated, other_model_dir, tmp_path
):
    """Recorded on the genuine artifact; reproduced on its regeneration (other bytes, the same artifact);
    refused before any scoring on a copy with one key span moved, naming the document."""
    recorded = tmp_path / "recorded.jsonl"
    refresh_command.run(
        compose_config(
            "leaderboard_refresh", refresh_overrides(tiny_artifact, recorded, other_model_dir, "record=true")
        )
    )
    line = read_lines(recorded)[0][1]
    assert (
        line["schema_version"] == RESULTS_VERSION
        and line["artifact"]["identity"]["discrete"] == load_artifact(tiny_artifact).identity.discrete
    )
    pins = refresh_overrides(tiny_artifact, recorded, other_model_dir)
    again = [o if not o.startswith("artifact=") else f"artifact={regenerated}" for o in pins]
    rows = refresh_command.run(compose_config("leaderboard_refresh", again))
    assert rows[0]["artifact"]["contents"] != line["artifact"]["contents"]
    forged = remerged(tiny_artifact, tmp_path / "forged" / tiny_artifact.name, consistent_forgery)
    moved = [o if not o.startswith("artifact=") else f"artifact={forged}" for o in pins]
    with pytest.raises(
        PipelineError, match=r"has discrete \w+, the refresh pins .*key tokens or key spans differ in doc-0"
    ):
        refresh_command.run(compose_config("leaderboard_refresh", moved))
    unpinned = [o if not o.startswith("discrete=") else "discrete=null" for o in moved]
    with pytest.raises(
        PipelineError, match=r"scored on another artifact than .*key tokens or key spans differ in doc-0"
    ):
        refresh_command.run(compose_config("leaderboard_refresh", unpinned))


def test_the_board_shows_a_regeneration_with_the_genuine_results_and_keeps_others_apart(
    tiny_artifact, regenerated, other_model_dir, tmp_path
):
    genuine = score(other_model_dir, tiny_artifact, tmp_path)
    again = score(other_model_dir, regenerated, tmp_path, "add_bos=false")
    far = craft(tiny_artifact, tmp_path / "far" / tiny_artifact.name, tokens=jittered(0.04, only_doc="doc-2"))
    apart = score(other_model_dir, far, tmp_path, "dtype=float32")
    df = read_scores(tmp_path / "scores.jsonl")
    rows = list(df.iter_rows(named=True))
    assert same_artifact(rows[0], rows[1]) and not same_artifact(rows[0], rows[2])
    board = leaderboard.select(df, genuine["artifact"]["contents"][:12])
    assert sorted(board["result_id"]) == sorted([genuine["result_id"], again["result_id"]])
    note = other_contents(df, board)
    assert note and apart["artifact"]["contents"][:12] in note
    newest = leaderboard.select(df)  # the newest result's artifact: the far one, alone
    assert newest["result_id"].to_list() == [apart["result_id"]]
    by_discrete = leaderboard.select(df, genuine["artifact"]["identity"]["discrete"][:12])
    assert by_discrete["result_id"].to_list() == [apart["result_id"]]  # all three share it: the newest


def test_compare_command_prints_the_verdict_and_the_differences(tiny_artifact, regenerated, tmp_path, capsys):
    result = compare_artifacts.run(
        compose_config("compare_artifacts", [f"a={tiny_artifact}", f"b={regenerated}"])
    )
    out = capsys.readouterr().out
    assert result["exact"] is False and "the same artifact: yes" in out and "| lsd | " in out
    forged = remerged(tiny_artifact, tmp_path / "forged" / tiny_artifact.name, consistent_forgery)
    with pytest.raises(PipelineError, match="not the same artifact: key tokens or key spans differ in doc-0"):
        compare_artifacts.run(compose_config("compare_artifacts", [f"a={tiny_artifact}", f"b={forged}"]))
    assert "key flags that differ: doc-0 (1)" in capsys.readouterr().out
    with pytest.raises(PipelineError, match="give the artifact to compare with: b="):
        compare_artifacts.run(compose_config("compare_artifacts", [f"a={tiny_artifact}"]))


def test_a_results_line_of_schema_4_must_carry_the_identity(tiny_artifact, other_model_dir, tmp_path):
    row = score(other_model_dir, tiny_artifact, tmp_path)
    path = tmp_path / "scores.jsonl"
    broken = dict(row, artifact={k: v for k, v in row["artifact"].items() if k != "identity"})
    path.write_text(json.dumps(broken) + "\n")
    with pytest.raises(PipelineError, match=r"line 1.*artifact\.identity. is missing or malformed"):
        read_lines(path)


def test_contents_hash_is_of_the_values_not_the_file(tiny_artifact):
    art = load_artifact(tiny_artifact)
    tables = {name: getattr(art, name) for name in ("documents", "tokens", "spans")}
    chunked = {n: pa.concat_tables([t.slice(0, 2), t.slice(2)]) for n, t in tables.items()}
    assert contents_sha256(chunked) == art.contents
    sliced = {**tables, "tokens": pa.concat_tables([tables["tokens"].slice(0, 5), tables["tokens"].slice(5)])}
    assert contents_sha256(sliced) == art.contents
    lsd = tables["tokens"]["lsd"].to_numpy(zero_copy_only=False).copy()
    lsd[np.flatnonzero(~np.isnan(lsd))[0]] += 1e-12
    nudged = tables["tokens"].set_column(7, "lsd", pa.array(lsd, from_pandas=True))
    assert contents_sha256({**tables, "tokens": nudged}) != art.contents
    renamed = tables["documents"].set_column(0, "doc_id", pa.array(["a", "b", "c"]))
    assert contents_sha256({**tables, "documents": renamed}) != art.contents


def consistent_forgery(df: pl.DataFrame) -> pl.DataFrame:
    """A plain token past the first two short windows made key, with LSD, weight and flag consistent:
    undetectable by design (only the evaluator could tell)."""
    rows = df.with_row_index().filter(
        (pl.col("token_index") > 40) & ~pl.col("is_key") & pl.col("short_logprob").is_not_null()
    )
    row = int(rows["index"][0])
    long = df["long_logprob"][row]
    df = cell("short_logprob", row, long - 10.0)(df)
    df = cell("lsd", row, 10.0)(cell("soft_weight", row, 5.0)(df))
    return cell("is_key", row, True)(df)


def test_forged_results_never_take_the_genuine_artifacts_place(tiny_artifact, other_model_dir, tmp_path):
    """A fully consistent LSD forgery loads (by design), under the genuine name and fingerprint; its
    results name other contents, so the genuine artifact's leaderboard and refresh never show them."""
    forged_dir = remerged(tiny_artifact, tmp_path / "forged" / tiny_artifact.name, consistent_forgery)
    forged, genuine = load_artifact(forged_dir), load_artifact(tiny_artifact)
    assert (
        forged.manifest["fingerprint"] == genuine.manifest["fingerprint"]
        and forged.contents != genuine.contents
    )
    real = score(other_model_dir, tiny_artifact, tmp_path)
    fake = score(other_model_dir, forged_dir, tmp_path)
    assert (
        fake["artifact"]["contents"] == forged.contents and real["artifact"]["contents"] == genuine.contents
    )
    assert fake["corpus"]["longppl"] != real["corpus"]["longppl"] and fake["result_id"] != real["result_id"]
    df = read_scores(tmp_path / "scores.jsonl")
    newest = leaderboard.select(df)
    assert newest.height == 1 and newest["contents"][0] == forged.contents
    board = leaderboard.select(df, genuine.contents[:12])
    assert board["longppl"].to_list() == [real["corpus"]["longppl"]]
    note = other_contents(df, board)
    assert note and forged.contents[:12] in note
    md = leaderboard.render(df, tmp_path / "board", artifact=genuine.contents[:12])[
        "leaderboard.md"
    ].read_text()
    assert f"contents `{genuine.contents[:12]}`" in md
    cfg = compose_config(
        "leaderboard_refresh",
        [
            f"artifact={forged_dir}",
            f"fingerprint={genuine.manifest['fingerprint']}",
            f"contents={genuine.contents}",
            "discrete=null",
            f"recorded={tmp_path / 'recorded.jsonl'}",
            f"models=[{{name: tiny, spec: '{other_model_dir}', revision: null}}]",
        ],
    )
    with pytest.raises(PipelineError, match=rf"has contents {forged.contents[:12]}, the refresh pins"):
        refresh_command.run(cfg)
