"""LooGLE's evidence located in its documents, per task and rule.

``longppl loogle-evidence [key=value ...]`` (`make loogle-evidence`; Hydra overrides of
``conf/loogle_evidence.yaml``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.commands.shell import hydra_main, plain
from pipeline.files import write_json_atomic
from pipeline.formats import file_slug
from pipeline.hub import offline_unless
from pipeline.loogle.data.reading import DataSource, load_questions
from pipeline.loogle.evidence.alignment_report import report, settings, table_lines, tasks_of
from pipeline.results import lines


def run(cfg: Any) -> dict[str, Any]:
    values = plain(cfg)
    source = DataSource(str(values["data"]), str(values["dataset"]), values.get("revision"))
    offline_unless(source.data == "hub")
    default = Path(str(values["results_dir"])) / f"loogle-evidence--{file_slug(source.label, 'data')}.json"
    out = lines.check_writable(Path(str(values["out"])) if values.get("out") else default, "out")
    questions = {task: load_questions(task, source) for task in tasks_of(str(values["task"]), source)}
    reports = [report(task, task_questions) for task, task_questions in questions.items()]
    result = {"data": source.label, "alignment": settings(), "tasks": reports}
    write_json_atomic(out, result)
    print("\n".join([*table_lines(reports), f"written       {out}"]))
    return result


def main() -> None:
    hydra_main("loogle_evidence", run)


if __name__ == "__main__":
    main()
