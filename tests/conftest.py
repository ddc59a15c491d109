"""Suite-wide settings.

Hypothesis' per-example deadline (200 ms) is a timing assertion: on a busy CI
machine one slow example fails a correct property. Speed is measured in bench/,
so no property test here has a deadline.
"""

from hypothesis import settings

settings.register_profile("poolscope", deadline=None)
settings.load_profile("poolscope")
