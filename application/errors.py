"""Errors the adapters translate provider and storage failures into."""

from __future__ import annotations

from domain.errors import TensorantError


class ProviderError(TensorantError):
    problem = "provider-error"
    status = 502
    title = "RunPod refused the request"


class InvalidCredentials(ProviderError):
    problem = "invalid-key"
    status = 422
    title = "RunPod rejected the API key"


class InsufficientPermissions(ProviderError):
    problem = "read-only-key"
    status = 422
    title = "The API key lacks a required permission"


class ProviderUnavailable(ProviderError):
    problem = "runpod-unreachable"
    status = 503
    title = "RunPod could not be reached"


class CapacityUnavailable(ProviderError):
    problem = "gpu-unavailable"
    status = 409
    title = "No GPU of that type is available now"


class InsufficientBalance(ProviderError):
    problem = "low-balance"
    status = 409
    title = "The RunPod balance does not cover the request"


class PodGone(ProviderError):
    problem = "pod-gone"
    status = 409
    title = "RunPod no longer knows the Pod"


class StorageCheckFailed(TensorantError):
    problem = "storage-check-failed"
    status = 422
    title = "The storage check failed"

    def __init__(self, step: str, detail: str) -> None:
        super().__init__(f"storage check failed at {step}: {detail}", step=step)
        self.step = step


class VolumeNotFound(StorageCheckFailed):
    problem = "volume-not-found"
    title = "The network volume was not found"


class UnsafeEndpoint(TensorantError):
    problem = "unsafe-endpoint"
    status = 422
    title = "The S3 endpoint is not allowed"


class SecretUnavailable(TensorantError):
    problem = "secret-unavailable"
    status = 409
    title = "The stored secret cannot be read"


class InvalidHubToken(TensorantError):
    problem = "invalid-hub-token"
    status = 422
    title = "The Hugging Face Hub rejected the token"


class HubUnavailable(TensorantError):
    problem = "hub-unreachable"
    status = 503
    title = "The Hugging Face Hub could not be reached"
