"""The hook where process sets meet the operations of this package that do
not take them yet (sparse allreduce, object collectives, Adasum): only the
global set (None, or a set whose process_set_id is 0) is accepted."""


def require_global(process_set, what):
    if process_set is None or getattr(process_set, "process_set_id", None) == 0:
        return
    raise NotImplementedError(
        "%s: process_set other than the global set is not supported yet; leave "
        "process_set at its default" % what)
