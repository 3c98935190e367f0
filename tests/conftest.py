"""Suite-wide settings."""

import os

from hypothesis import settings

# A loaded 2-core CI runner can take longer than hypothesis' default 200 ms per example; the property
# tests bound their work with max_examples, not with wall-clock deadlines.
settings.register_profile("gpudra", deadline=None)
# CI (CI=true, as .ci/run and most CI services set it): the same examples on every run, so a run fails
# or passes for the code, not for the draw; a failure prints the blob that reproduces it
# (@reproduce_failure); bugs found while exploring locally are pinned with @example.
settings.register_profile("ci", deadline=None, derandomize=True, max_examples=50, print_blob=True, database=None)
settings.load_profile("ci" if os.environ.get("CI", "").lower() == "true" else "gpudra")
