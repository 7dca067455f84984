"""The ClientApp: one fedpart client per node (its partition-id), personal tensors in its state."""

from fedpart.flower import client_app

app = client_app()
