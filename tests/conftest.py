"""Suite-wide settings."""

from hypothesis import settings

# A loaded 2-core CI runner can take longer than hypothesis' default 200 ms per example; the property
# tests bound their work with max_examples, not with wall-clock deadlines.
settings.register_profile("gpudra", deadline=None)
settings.load_profile("gpudra")
