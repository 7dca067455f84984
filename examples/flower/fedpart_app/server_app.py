"""The ServerApp: fedpart's round loop, sampling and the method's aggregation."""

from pathlib import Path

from fedpart.flower import server_app

# a relative `config` in the run config is read from the project directory
app = server_app(base=Path(__file__).resolve().parent.parent)
