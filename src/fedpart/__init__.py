"""fedpart: personalized federated learning by partial (layer-wise) model sharing."""

from fedpart.api import resume, run
from fedpart.config import Config, load_config
from fedpart.engine.simulation import Result
from fedpart.errors import ConfigError, DataError, FedpartError, TrainingError

__version__ = "0.1.0"

__all__ = [
    "Config",
    "ConfigError",
    "DataError",
    "FedpartError",
    "Result",
    "TrainingError",
    "load_config",
    "resume",
    "run",
]
