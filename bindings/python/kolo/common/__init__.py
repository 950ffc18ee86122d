"""kolo.common: the Python every framework binding shares, with no
framework (as horovod.common is for Horovod): process sets
(:mod:`kolo.common.process_sets`) and the collectives on arrays
(:mod:`kolo.common.arrays`). ``import kolo`` exports their public names;
:mod:`kolo.torch` re-exports what horovod.torch users import.
"""
