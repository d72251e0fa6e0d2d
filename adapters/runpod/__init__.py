"""RunPod: one `RunPodCompute` (the algorithm that keeps one launch to one Pod) over two thin
wires, GraphQL and REST v2. See README.md in this folder."""

from adapters.runpod.compute import RunPodCompute
from adapters.runpod.factory import APIS, make_compute

__all__ = ["APIS", "RunPodCompute", "make_compute"]
