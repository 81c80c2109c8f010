"""Reports: self-contained HTML pages about a trial (``tensortap report``)."""

from tensortap.report.xgboost import write_xgboost_report, xgboost_report

__all__ = ["write_xgboost_report", "xgboost_report"]
