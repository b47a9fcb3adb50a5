"""Downloads and their caches, below both :mod:`fedlabels.data` and :mod:`fedlabels.learners`."""
