"""A run's result (records, JSON and CSV), its saved models and prediction with them."""

from fedlabels.results.run_result import (
    RoundRecord,
    RunResult,
    device_line,
    format_table,
    load_result,
    privacy_line,
    site_ledgers_line,
    table_warnings,
)

__all__ = ["RoundRecord", "RunResult", "device_line", "format_table", "load_result",
           "privacy_line", "site_ledgers_line", "table_warnings"]
