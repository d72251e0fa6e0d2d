"""Request and response models per resource; field names are those of docs/contract.md."""
