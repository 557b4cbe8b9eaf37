"""The one error type of request handling: a message for the client and the HTTP status it means.

Raised anywhere between reading a body and streaming the last event; the HTTP layer answers it as
an OpenAI-style error object (a JSON body, or an error event inside a stream). Imports no torch.
"""

from __future__ import annotations


class BadRequest(Exception):
    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def error_body(message: str, status: int) -> dict:
    """OpenAI's error object: the client libraries read `message` from it."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    return {"error": {"message": message, "type": kind, "code": status}}
