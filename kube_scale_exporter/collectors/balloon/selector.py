"""--balloon.selector's syntax, checked before the API server is asked."""

import re

_SELECTOR_TERM = re.compile(
    r"^\s*!?\s*[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?\s*"
    r"((=|==|!=)\s*[-A-Za-z0-9_.]*|\s+(in|notin)\s*\([-A-Za-z0-9_., ]*\))?\s*$"
)


def valid_selector(selector: str) -> bool:
    """Label selector syntax as the API server accepts it (terms joined by commas)."""
    terms, depth, start = [], 0, 0
    for i, ch in enumerate(selector):
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            terms.append(selector[start:i])
            start = i + 1
    terms.append(selector[start:])
    return bool(selector.strip()) and all(_SELECTOR_TERM.match(t) for t in terms)
