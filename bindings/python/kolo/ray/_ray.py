"""Ray as an optional dependency: one place that imports it and says how to
get it when it is missing."""

INSTALL_HINT = 'pip install "ray[train]"  (or: pip install "kolo[ray]")'


def require_ray():
    """Returns the ray module; ImportError naming the install command when
    Ray is not installed."""
    try:
        import ray
    except ImportError as e:
        raise ImportError(
            "kolo.ray needs Ray, which is not installed in this environment: %s (%s)"
            % (INSTALL_HINT, e)) from e
    return ray
