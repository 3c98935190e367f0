"""The name importers outside the package use for gpudra.semver, which is below gpudra.api in the package
layering (gpudra.cel needs it, and gpudra.api needs gpudra.cel)."""

from gpudra.semver import Semver, SemverError, is_semver, parse_semver

__all__ = ["Semver", "SemverError", "is_semver", "parse_semver"]
