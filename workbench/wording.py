"""A value's own words put in a form's: field names in a message become the labels a form shows.

A logic value checks itself in its API's words (``max_windows must be a whole number >=
stable_windows (3), got 2``), the words a notebook caller uses. A form shows those fields under
labels ("max windows"); a person there should read those.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["names_in_labels"]


def names_in_labels(message: str, labels: Mapping[str, str]) -> str:
    """``message`` with every whole-word field name that has a label replaced by that label."""
    if not labels:
        return message
    names = sorted(labels, key=len, reverse=True)  # the longest first: no name cut inside another
    pattern = re.compile(r"(?<![\w-])(" + "|".join(map(re.escape, names)) + r")(?![\w-])")
    return pattern.sub(lambda match: labels[match.group(1)], message)
