"""The training container (T1): the program inside the Pod that fine-tunes a LoRA adapter.

Importing this package imports nothing heavy: the control plane imports `trainer.protocol`.
"""

__version__ = "1.0.0"
