"""Cost limits (placeholder, replaced by the estimator)."""

def check(expression, checked) -> int:
    return 0
