"""A LooGLE artifact's LSD and key tokens inside its located evidence against outside.
`make loogle-keytokens` (``conf/loogle_keytokens.yaml``): ``pipeline.loogle.evidence.keytoken_rates``."""

from __future__ import annotations

from typing import Any

from pipeline.api import run_work
from pipeline.commands.shell import hydra_main, plain
from pipeline.loogle.evidence.keytoken_rates import RatesOptions, rates_report
from pipeline.reporting.loogle_keytokens import summary


def run(cfg: Any) -> dict[str, Any]:
    result, out, plot = run_work(rates_report, RatesOptions, plain(cfg))
    print(summary(result, out, plot))
    return result


def main() -> None:
    hydra_main("loogle_keytokens", run)


if __name__ == "__main__":
    main()
