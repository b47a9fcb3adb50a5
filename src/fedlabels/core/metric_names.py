"""The names of the scalar test metrics (:mod:`fedlabels.core.clinical` computes them),
without numpy: the command line offers them as ``--metric`` choices."""

#: scalar metrics, in the order tables show them (``--metric`` picks one as the headline)
SCALAR_METRICS = ("accuracy", "balanced_accuracy", "macro_f1", "auroc", "sensitivity",
                  "specificity")
#: short column headings
METRIC_HEADINGS = {"accuracy": "acc", "balanced_accuracy": "bal acc", "macro_f1": "macro-F1",
                   "auroc": "AUROC", "sensitivity": "sens", "specificity": "spec"}
#: each metric's name in the report's headings and figures
METRIC_NAMES = {"accuracy": "accuracy", "balanced_accuracy": "balanced accuracy",
                "macro_f1": "macro-F1", "auroc": "AUROC", "sensitivity": "sensitivity",
                "specificity": "specificity"}
