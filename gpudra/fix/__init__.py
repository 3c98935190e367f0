"""The mechanical repairs behind `gpudra validate --fix`: `fix_documents(docs)`.

Above the object model: the repairs name what gpudra's driver publishes (gpudra.vocabulary, the driver's device
classes), so they live outside gpudra.api, which the driver itself builds on.
"""

from .documents import FixResult, fix_documents

__all__ = ["FixResult", "fix_documents"]
