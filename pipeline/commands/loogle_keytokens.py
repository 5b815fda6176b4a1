"""A LooGLE artifact's LSD and key tokens inside its located evidence against outside.

``longppl loogle-keytokens [key=value ...]`` (`make loogle-keytokens`; Hydra overrides of
``conf/loogle_keytokens.yaml``): with a circular-shift null, and the LSD of each question's last evidence
span against how far back its evidence lies (``pipeline.loogle.evidence.keytoken_rates``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.artifact.reader import open_artifact
from pipeline.commands.shell import hydra_main, plain
from pipeline.files import write_json_atomic
from pipeline.formats import file_slug
from pipeline.loogle.evidence.keytoken_rates import EvidenceSettings, analyse, table_lines
from pipeline.reporting.loogle_keytokens import write_evidence_plot
from pipeline.results import lines


def run(cfg: Any) -> dict[str, Any]:
    values = plain(cfg)
    settings = EvidenceSettings(int(values["shifts"]), int(values["seed"]), bool(values["first_window"]))
    artifact = open_artifact(str(values["artifact"]))
    name = file_slug(artifact.root.name, "artifact")
    suffix = "" if settings.first_window else "--no-first-window"
    default = Path(str(values["results_dir"])) / f"loogle-keytokens--{name}{suffix}.json"
    out = lines.check_writable(Path(str(values["out"])) if values.get("out") else default, "out")
    analysis = analyse(artifact, settings)
    source = {"path": str(artifact.root), "fingerprint": artifact.manifest["fingerprint"]}
    source |= {"contents": artifact.contents, "K": artifact.settings["K"], "d": artifact.settings["d"]}
    source["max_tokens"] = artifact.settings.get("max_tokens")
    result = {"artifact": source, **analysis.report}
    write_json_atomic(out, result)
    plot = out.with_suffix(".png")
    write_evidence_plot(analysis, artifact.root.name, plot)
    print("\n".join([*table_lines(result), f"written       {out}", f"plot          {plot}"]))
    return result


def main() -> None:
    hydra_main("loogle_keytokens", run)


if __name__ == "__main__":
    main()
