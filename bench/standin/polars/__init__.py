"""A stand-in for polars on a GPU machine where its 40 MB wheel cannot travel: the two stages never
call polars, but the results module builds polars dtypes at import (pl.Int64, pl.Datetime("us", "UTC")).
Those exist here; any other use fails loudly."""

DTYPES = {"Datetime", "Duration", "List", "Struct", "Array", "Decimal", "Enum", "Categorical"}


class _Missing:
    def __init__(self, name):
        self.name = name

    def __call__(self, *args, **kwargs):
        if self.name in DTYPES:
            return _Missing(f"{self.name}(...)")
        raise RuntimeError(f"polars.{self.name}: polars is a stand-in on this machine; install its wheel")

    def __getattr__(self, attr):
        return _Missing(f"{self.name}.{attr}")


def __getattr__(name):
    return _Missing(name)
