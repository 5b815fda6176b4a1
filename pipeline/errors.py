"""The one exception type the pipeline raises for problems a user can fix."""


class PipelineError(Exception):
    """A one-line, actionable error: what is wrong and what to do about it.

    Command-line entry points print it as ``error: <message>`` and exit with status 2,
    without a traceback.
    """
