"""Means: ``gc.get_referrers``, in another module of the candidate's own (_gc_helper.py): the
check reads every file of the candidate, not only this one.
Expect: heap_walk reject in _gc_helper.py"""

from _gc_helper import count_referrers
from _kernel import launch


def add_relu(x, y):
    count_referrers(x)
    return launch(x, y)
