"""The Python client of the cronfleet API (`from kit.client import Client`): standard
library only, its types written from the API's OpenAPI document (kit.client.models)."""

from kit.client.client import ApiError, Client, Permanent

__all__ = ["ApiError", "Client", "Permanent"]
