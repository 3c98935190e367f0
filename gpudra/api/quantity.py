"""The name importers outside the package use for gpudra.quantity (resource.Quantity), which is below gpudra.api
in the package layering (gpudra.cel needs it, and gpudra.api needs gpudra.cel)."""

from gpudra.quantity import MAX_DIGITS, MAX_VALUE, NANO, Format, Quantity, QuantityError, parse_quantity

__all__ = ["MAX_DIGITS", "MAX_VALUE", "NANO", "Format", "Quantity", "QuantityError", "parse_quantity"]
